"""Which comparison a worker serves next: round-robin, with back-off for ones that fail.

Each pass starts after the comparison served last, so no comparison waits behind another's
backlog for more than one batch, and a comparison whose step fails is left out for a while that
doubles with each consecutive failure (``poll_interval`` up to ``failure_backoff_max``): it
never holds a worker in a retry loop, while its attempts are counted in Redis (see worker.py).
One the worker cannot serve (service/unavailable.py) is deferred without a failure counted.
"""

from __future__ import annotations

import bisect
import time


class Schedule:
    def __init__(self, first_delay: float, max_delay: float) -> None:
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.last: str | None = None
        self.failures: dict[str, int] = {}
        self.not_before: dict[str, float] = {}

    def order(self, ids: list[str]) -> list[str]:
        """``ids`` (sorted) from the one after the last served, without those backing off."""
        now = time.monotonic()
        for gone in self.not_before.keys() - set(ids):  # deleted comparisons
            self.succeeded(gone)
        ready = [cid for cid in ids if self.not_before.get(cid, 0.0) <= now]
        split = 0 if self.last is None else bisect.bisect_right(ready, self.last)
        return ready[split:] + ready[:split]

    def served(self, cid: str) -> None:
        self.last = cid

    def succeeded(self, cid: str) -> None:
        self.failures.pop(cid, None)
        self.not_before.pop(cid, None)

    def defer(self, cid: str, delay: float) -> None:
        """Leave ``cid`` out for ``delay`` seconds, counting no failure (a comparison this
        worker cannot serve: service/unavailable.py)."""
        self.not_before[cid] = time.monotonic() + delay

    def failed(self, cid: str) -> float:
        """Back off ``cid``; returns the delay before it is served again."""
        count = self.failures.get(cid, 0) + 1
        self.failures[cid] = count
        delay = min(self.max_delay, self.first_delay * 2 ** (count - 1))
        self.not_before[cid] = time.monotonic() + delay
        return delay
