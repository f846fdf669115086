"""The stored data history of a comparison: Redis list of binary blocks, cached in the worker.

A worker keeps, per comparison, only the columns of x that some model reads (a model reading 1
of 10,000 columns costs 1 column), loads the blocks from Redis a bounded number of bytes at a
time, and drops least recently used histories past ``history_cache`` comparisons or
``history_cache_bytes`` bytes. The rows an estimator sees are the same values as the full
blocks' (``model_view`` maps a model's columns onto the kept ones)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from modelcompare.estimators import ColumnView, Rows
from modelcompare.estimators.data.history import RowsHistory, select_columns
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.connection import SyncClient
from modelcompare.service.store.keys import Keys

LOAD_BYTES = 32 * 1024 * 1024  # stored blocks fetched per LRANGE, about (the first: one block)
MAX_LOAD_BLOCKS = 1024


def read_columns(models: Iterable[Any], x_dim: int) -> tuple[int, ...] | None:
    """The columns of x some model reads (each model's ``columns``), sorted; None when they are
    all of them (or there is no x), so that nothing is narrowed."""
    read = sorted({column for model in models for column in (model.columns or ())})
    return None if not x_dim or len(read) >= x_dim else tuple(read)


class KeptColumns:
    """A history whose x holds only the columns ``kept_columns`` of the rows (in that order)."""

    def __init__(self, history: RowsHistory, kept_columns: tuple[int, ...]) -> None:
        self._history = history
        self.kept_columns = kept_columns

    def __len__(self) -> int:
        return len(self._history)

    def sample(self, size: int, generator: torch.Generator) -> Rows:
        return self._history.sample(size, generator)

    def blocks(self, block_rows: int) -> Iterator[Rows]:
        return self._history.blocks(block_rows)


def model_view(history: Any, columns: Sequence[int] | None, rows: Rows) -> tuple[ColumnView, Rows]:
    """A model's view of ``history`` (its ``columns`` of x) and its part of the chunk ``rows``:
    full rows of the comparison, or, from a narrowed history's ``block``, rows of its kept
    columns (told apart by their width: a narrowed history keeps fewer than all)."""
    kept = getattr(history, "kept_columns", None)
    if kept is None or columns is None:
        view = ColumnView(history, columns)
        return view, view.select(rows)
    position = {column: index for index, column in enumerate(kept)}
    view = ColumnView(history, [position[column] for column in columns])
    narrowed = rows.x is not None and rows.x.shape[1] == len(kept)
    chunk = view.select(rows) if narrowed else select_columns(rows, torch.as_tensor(columns))
    return view, chunk


class BlockHistory:
    """All loaded blocks of one comparison in growable tensors (x narrowed to ``kept`` columns
    when given), with each block's row offset."""

    def __init__(self, x_dim: int, has_y: bool, kept: tuple[int, ...] | None = None) -> None:
        self.kept = kept
        width = (len(kept) if kept is not None else x_dim) if x_dim else 0
        self._x = torch.empty(0, width, dtype=torch.float64) if x_dim else None
        self._y = torch.empty(0, dtype=torch.float64) if has_y else None
        self._length = 0
        self._offsets = [0]

    @property
    def loaded(self) -> int:
        return len(self._offsets) - 1

    @property
    def nbytes(self) -> int:
        """Bytes held, growth room included."""
        return sum(t.nbytes for t in (self._x, self._y) if t is not None)

    def covers(self, kept: tuple[int, ...] | None) -> bool:
        return self.kept is None or (kept is not None and set(kept) <= set(self.kept))

    def append(self, rows: Rows) -> None:
        """Append a block: full rows (narrowed here) or rows already narrowed to ``kept``."""
        if (rows.x is None) != (self._x is None) or (rows.y is None) != (self._y is None):
            raise ValueError("rows do not match the history's columns (x and y presence)")
        x = rows.x
        if x is not None and self.kept is not None and x.shape[1] != len(self.kept):
            x = x[:, list(self.kept)]
        needed = self._length + rows.count
        capacity = 0 if self._y is None and self._x is None else (
            self._y if self._y is not None else self._x).shape[0]  # type: ignore[union-attr]
        if needed > capacity:
            capacity = max(needed, 2 * capacity, 1024)
            self._x = None if self._x is None else _grow(self._x, capacity)
            self._y = None if self._y is None else _grow(self._y, capacity)
        if self._x is not None:
            self._x[self._length:needed] = x
        if self._y is not None:
            self._y[self._length:needed] = rows.y
        self._length = needed
        self._offsets.append(needed)

    def _rows(self, length: int) -> Rows:
        return Rows(None if self._x is None else self._x[:length],
                    None if self._y is None else self._y[:length])

    def prefix(self, blocks: int) -> RowsHistory | KeptColumns:
        """The rows of the first ``blocks`` blocks: the history before chunk ``blocks + 1``."""
        history = RowsHistory(self._rows(self._offsets[blocks]))
        return history if self.kept is None else KeptColumns(history, self.kept)

    def block(self, index: int) -> Rows:
        """Block ``index`` (0-based: the chunk of sequence ``index + 1``), x narrowed to
        ``kept``."""
        return self._rows(self._length).slice(self._offsets[index], self._offsets[index + 1])


def _grow(buffer: torch.Tensor, capacity: int) -> torch.Tensor:
    grown = torch.empty((capacity, *buffer.shape[1:]), dtype=buffer.dtype)
    grown[: buffer.shape[0]] = buffer
    return grown


class HistoryCache:
    """Least-recently-used ``BlockHistory`` per comparison, filled from Redis on demand: at most
    ``capacity`` comparisons and ``max_bytes`` bytes (the one in use stays even when larger)."""

    def __init__(self, client: SyncClient, prefix: str, capacity: int,
                 max_bytes: int | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, BlockHistory] = OrderedDict()

    @property
    def nbytes(self) -> int:
        return sum(history.nbytes for history in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cid: str) -> bool:
        return cid in self._entries

    def get(self, cid: str, x_dim: int, has_y: bool, blocks: int,
            columns: tuple[int, ...] | None = None) -> BlockHistory:
        """The history of ``cid`` holding at least its first ``blocks`` blocks, with at least
        the x ``columns`` (``read_columns``; None: all of them)."""
        history = self._entries.pop(cid, None)
        if history is None or not history.covers(columns):
            history = BlockHistory(x_dim, has_y, columns)
        self._entries[cid] = history
        self._evict(keep=cid)  # before loading: room for what comes
        if history.loaded < blocks:
            self._load(cid, history, blocks)
            self._evict(keep=cid)
        return history

    def of(self, cid: str, spec: Any, blocks: int) -> BlockHistory:
        """``get`` for a comparison's spec: the columns its models read."""
        return self.get(cid, spec.x_dim, spec.has_y, blocks, read_columns(spec.models, spec.x_dim))

    def _load(self, cid: str, history: BlockHistory, blocks: int) -> None:
        """Blocks ``history.loaded`` to ``blocks - 1`` from Redis, about ``LOAD_BYTES`` per
        request, each narrowed as it is decoded."""
        key, count = Keys(self._prefix, cid).blocks, 1
        while history.loaded < blocks:
            first = history.loaded
            last = min(first + count, blocks) - 1
            stored = self._client.lrange(key, first, last)
            if len(stored) != last - first + 1:
                raise RuntimeError(f"comparison {cid} has {first + len(stored)} blocks")
            size = sum(len(data) for data in stored)
            for index in range(len(stored)):
                data, stored[index] = stored[index], b""
                history.append(decode_block(data, history.kept))
            del stored, data
            count = max(1, min(MAX_LOAD_BLOCKS, LOAD_BYTES * (last - first + 1) // max(size, 1)))

    def _evict(self, keep: str) -> None:
        while len(self._entries) > 1 and (
                len(self._entries) > self._capacity
                or (self._max_bytes is not None and self.nbytes > self._max_bytes)):
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            del self._entries[oldest]

    def forget(self, cid: str) -> None:
        self._entries.pop(cid, None)
