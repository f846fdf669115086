"""The chunk schedule: 20 rows while n <= 80, n/4 while n < 2000, 500 after; a stream that
starts from a Gaussian takes its first rows, up to a bound, as one piece."""

from __future__ import annotations

import itertools

import pytest

from modelcompare.estimators.data.schedule import max_chunk_rows, split_points


@pytest.mark.parametrize(
    ("n", "rows"),
    [(0, 20), (80, 20), (81, 20), (100, 25), (1999, 499), (2000, 500), (10**6, 500)],
)
def test_max_chunk_rows(n: int, rows: int) -> None:
    assert max_chunk_rows(n) == rows


@pytest.mark.parametrize(("n", "rows"), [(0, 1), (0, 3000), (57, 45), (1500, 2100), (5000, 1234)])
def test_split_points_tile_the_chunk_within_the_schedule(n: int, rows: int) -> None:
    pieces = list(split_points(n, rows))
    assert pieces[0][0] == 0 and pieces[-1][1] == rows
    for (_, stop), (next_start, _) in itertools.pairwise(pieces):
        assert stop == next_start
    for start, stop in pieces:
        assert 0 < stop - start <= max_chunk_rows(n + start)
        # Only the last piece may be short of what the schedule allows.
        if stop != rows:
            assert stop - start == max_chunk_rows(n + start)


def test_split_points_from_scratch() -> None:
    sizes = [stop - start for start, stop in split_points(0, 3000)]
    assert sizes[:5] == [20] * 5  # n = 0, 20, 40, 60, 80
    assert sizes[5:8] == [25, 31, 39]  # n = 100, 125, 156
    assert sizes[-2:] == [500, 500] or sizes[-1] <= 500
    assert sum(sizes) == 3000
    assert list(split_points(10, 0)) == []


@pytest.mark.parametrize(("rows", "first", "head"), [(500, 1830, 500), (3000, 1830, 1830),
                                                      (10, 1830, 10), (500, 0, 20)])
def test_a_gaussian_start_takes_the_first_rows_as_one_piece(
    rows: int, first: int, head: int
) -> None:
    """The stream's first ``first`` rows (as many as the chunk holds) are one piece, and the
    schedule cuts the rest from there; a stream already started is cut as before."""
    pieces = list(split_points(0, rows, first))
    assert pieces[0] == (0, head)
    assert pieces[1:] == [(head + start, head + stop)
                          for start, stop in split_points(head, rows - head)]
    assert list(split_points(57, 45, first)) == list(split_points(57, 45))
