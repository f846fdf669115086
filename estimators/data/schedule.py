"""How many new rows are absorbed at once: the chunk schedule of the SG-AIS literature.

20 rows while n <= 80, n/4 while n < 2000, 500 after. Larger incoming chunks are split, so the
estimate does not depend on how a client batches its data. A stream that starts from a Gaussian
(``online.gaussian_start``) takes its first rows, up to a bound, as one piece.
"""

from __future__ import annotations

from collections.abc import Iterator


def max_chunk_rows(n_seen: int) -> int:
    if n_seen <= 80:
        return 20
    if n_seen < 2000:
        return n_seen // 4
    return 500


def split_points(n_seen: int, rows: int, first: int = 0) -> Iterator[tuple[int, int]]:
    """(start, stop) offsets that cut ``rows`` new rows into schedule-sized pieces; with
    ``first`` > 0, a stream's first rows (``n_seen`` 0) up to ``first`` are one piece."""
    start = 0
    if n_seen == 0 and first > 0 and rows > 0:
        start = min(rows, first)
        yield 0, start
    while start < rows:
        stop = min(rows, start + max_chunk_rows(n_seen + start))
        yield start, stop
        start = stop
