"""Comparisons a worker cannot serve: a model's family is not installed here, or the installed
version cannot continue it (``ModelSpec.unavailable``).

Another worker, one with the plugin, may serve them, so this one leaves them alone: it claims,
reads, computes and counts nothing (no chunk attempt, no dead letter, no failed model), backs
the comparison off for ``failure_backoff_max`` seconds and says why in a waiting record
(``Keys.waiting``, refreshed at each re-check), where readers see the status ``waiting`` while
chunks are queued. The next applied commit of a worker that can serve it deletes the record;
its time to live ends it when no worker looks at the comparison any more. A helper computing
another worker's model updates (service/parallel.py) passes over the models it cannot build.
"""

from __future__ import annotations

import logging
import time

from modelcompare.service.metrics import Metrics
from modelcompare.service.scheduling import Schedule
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.queue import Queue
from modelcompare.service.store.waiting import Waiting
from modelcompare.service.store.work_records import Snapshot

log = logging.getLogger("modelcompare.worker")

# A waiting record outlives this many re-checks: a pass that comes late does not drop it.
RECORD_PERIODS = 3


def unbuildable(spec: ComparisonSpec) -> list[str]:
    """The models of ``spec`` this process cannot build."""
    return [m.name for m in spec.models if m.unavailable() is not None]


class LeftAlone:
    """One worker's check, before it serves a comparison, that it can build every model."""

    def __init__(self, queue: Queue, schedule: Schedule, period: float,
                 metrics: Metrics | None) -> None:
        self.queue, self.schedule, self.period, self.metrics = queue, schedule, period, metrics
        self.warned: dict[str, str] = {}  # comparison -> the reason logged last

    def check(self, cid: str, snap: Snapshot) -> bool:
        """True when this worker cannot serve the comparison: it is backed off for ``period``
        seconds, its waiting record refreshed, counted, and logged once per reason."""
        found = next(((m.family, why) for m in snap.spec.models
                      if (why := m.unavailable()) is not None), None)
        if found is None:
            self.warned.pop(cid, None)
            return False
        family, why = found
        self.schedule.defer(cid, self.period)
        self.queue.leave_alone(cid, snap.version, Waiting(why, self.queue.consumer, time.time()),
                               RECORD_PERIODS * self.period)
        if self.metrics is not None:
            self.metrics.left_alone.labels(family).inc()
        if self.warned.get(cid) != why:
            self.warned[cid] = why
            log.warning("comparison %s left alone: %s; a worker with it installed will serve it",
                        cid, why)
        return True

    def forget(self, cid: str) -> None:
        self.warned.pop(cid, None)
