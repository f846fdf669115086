"""The stored data history of a comparison: Redis list of binary blocks, cached in the worker."""

from __future__ import annotations

from collections import OrderedDict

from estimators import InMemoryHistory, Rows
from estimators.data.history import RowsHistory
from service.store.codec import decode_block
from service.store.connection import SyncClient
from service.store.keys import Keys


class BlockHistory:
    """All loaded blocks of one comparison in growable tensors, with each block's row offset."""

    def __init__(self, x_dim: int, has_y: bool) -> None:
        self._rows = InMemoryHistory(x_dim or None, has_y=has_y)
        self._offsets = [0]

    @property
    def loaded(self) -> int:
        return len(self._offsets) - 1

    def append(self, rows: Rows) -> None:
        self._rows.append(rows)
        self._offsets.append(len(self._rows))

    def prefix(self, blocks: int) -> RowsHistory:
        """The rows of the first ``blocks`` blocks: the history before chunk ``blocks + 1``."""
        return self._rows.prefix(self._offsets[blocks])

    def block(self, index: int) -> Rows:
        """Block ``index`` (0-based: the chunk of sequence ``index + 1``)."""
        return self._rows.rows().slice(self._offsets[index], self._offsets[index + 1])


class HistoryCache:
    """Least-recently-used ``BlockHistory`` per comparison, filled from Redis on demand."""

    def __init__(self, client: SyncClient, prefix: str, capacity: int) -> None:
        self._client = client
        self._prefix = prefix
        self._capacity = capacity
        self._entries: OrderedDict[str, BlockHistory] = OrderedDict()

    def get(self, cid: str, x_dim: int, has_y: bool, blocks: int) -> BlockHistory:
        """The history of ``cid`` holding at least its first ``blocks`` blocks."""
        history = self._entries.pop(cid, None) or BlockHistory(x_dim, has_y)
        self._entries[cid] = history
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        if history.loaded < blocks:
            stored = self._client.lrange(Keys(self._prefix, cid).blocks, history.loaded, blocks - 1)
            if len(stored) != blocks - history.loaded:
                raise RuntimeError(f"comparison {cid} has {history.loaded + len(stored)} blocks")
            for data in stored:
                history.append(decode_block(data))
        return history

    def forget(self, cid: str) -> None:
        self._entries.pop(cid, None)
