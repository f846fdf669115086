"""Lanes: a worker process serves comparisons on several threads, so that a costly update holds
one lane, not the worker (docs/design/lanes.md).

Each lane is a ``Worker`` loop of its own on a thread (service/worker_process.py), with its own
consumer name, so leases tell lanes apart as they tell processes apart, and the process's
``CostBook``. With two lanes
or more, lane 0 is the *express lane*: it serves only comparisons whose last chunk update took
at most ``express_lane_seconds`` CPU seconds, spends at most that much CPU per comparison before
moving on, helps no other worker and replays no model added mid-stream. A comparison it has not
measured yet is tried there with that limit as its budget; an update that passes the limit is
abandoned without costing the chunk an attempt, and the comparison goes to the other lanes,
which measure it again with every chunk they apply (a cheap one comes back). So a comparison of
cheap updates waits behind at most one express slice, however costly its neighbours are.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from modelcompare.service.core.config import Settings


class CostBook:
    """What the lanes of a process share: the CPU seconds of each comparison's last chunk
    update (math.inf for one that needs the general lanes before it is measured: a model
    catching up, an update that overran the express lane), and which comparisons a lane
    serves now. A lane does not help a sibling with a chunk's model tasks: threads of one
    process share its interpreter lock, and on the small tensors of a model's update two of
    them took 35% more CPU for no gain (benchmarks/parallel.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._serving: set[str] = set()

    def record(self, cid: str, seconds: float) -> None:
        with self._lock:
            self._seconds[cid] = seconds

    def forget(self, cid: str) -> None:
        with self._lock:
            self._seconds.pop(cid, None)

    def cost(self, cid: str) -> float | None:
        with self._lock:
            return self._seconds.get(cid)

    @contextlib.contextmanager
    def serving(self, cid: str) -> Iterator[None]:
        with self._lock:
            self._serving.add(cid)
        try:
            yield
        finally:
            with self._lock:
                self._serving.discard(cid)

    def served_here(self, cid: str) -> bool:
        """Whether a lane of this process serves ``cid`` now."""
        with self._lock:
            return cid in self._serving


@dataclass(frozen=True)
class Lane:
    """Which comparisons a lane serves: all of them (``express_seconds`` None), or, on the
    express lane, those whose last update took at most ``express_seconds`` (or is unknown)."""

    index: int = 0
    express_seconds: float | None = None
    book: CostBook = field(default_factory=CostBook)

    @property
    def express(self) -> bool:
        return self.express_seconds is not None

    def admits(self, cid: str) -> bool:
        if self.express_seconds is None:
            return True
        seconds = self.book.cost(cid)
        return seconds is None or seconds <= self.express_seconds

    @property
    def cutoff(self) -> float:
        """CPU seconds after which this lane abandons an update (``modelcompare.estimators.CutOff``)
        or moves on from a comparison: ``express_seconds`` on the express lane."""
        return math.inf if self.express_seconds is None else self.express_seconds

    def hand_over(self, cid: str) -> None:
        """Leave the comparison to the general lanes until one of them measures a chunk of it
        (its update passed the express limit, or a model of it is catching up)."""
        self.book.record(cid, math.inf)


def lanes_of(settings: Settings) -> list[Lane]:
    book = CostBook()
    count = settings.worker_lanes
    express = settings.express_lane_seconds if count > 1 else None
    return [Lane(0, express, book), *(Lane(i, None, book) for i in range(1, count))]


def lane_settings(settings: Settings) -> Settings:
    """One lane's settings: the history cache (comparisons and bytes) shared out among the
    lanes, so that the process holds what ``history_cache_bytes`` says in all."""
    count = settings.worker_lanes
    return settings.model_copy(update={
        "history_cache": max(1, settings.history_cache // count),
        "history_cache_bytes": max(1, settings.history_cache_bytes // count),
    })
