"""A worker's periodic chores: forget consumers that are gone.

Every ``housekeeping_interval`` seconds a worker removes, from each comparison's consumer group,
the consumers idle for over ``consumer_idle_max`` seconds that own no pending entry (workers
that exited or were killed and whose entries were claimed). A live worker that was only idle on
that stream loses nothing: its consumer is created again by its next read.
"""

from __future__ import annotations

import logging
import time

from modelcompare.service.store.queue import Queue
from modelcompare.service.store.work import WorkFinder

log = logging.getLogger("modelcompare.worker")


class Housekeeping:
    def __init__(self, queue: Queue, work: WorkFinder, interval: float,
                 consumer_idle_max: float) -> None:
        self.queue = queue
        self.work = work
        self.interval = interval
        self.consumer_idle_max = consumer_idle_max
        self.next_run = time.monotonic() + interval

    def run_if_due(self) -> int:
        """Prune every comparison's group if the interval has passed; consumers removed."""
        if time.monotonic() < self.next_run:
            return 0
        self.next_run = time.monotonic() + self.interval
        removed = 0
        found = self.queue.prune_consumers_many(self.work.comparison_ids(),
                                                self.consumer_idle_max)
        for cid, names in found.items():
            log.info("comparison %s: removed consumers that are gone: %s", cid, names)
            removed += len(names)
        return removed
