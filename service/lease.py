"""A worker's hold on one comparison: a short lease kept alive by a heartbeat thread.

The lease expires ``lease_ttl`` seconds after its last renewal, and the heartbeat renews it
every ``lease_ttl / 3`` while the worker serves the comparison (updates included), so a live
worker keeps it however long an update takes and a dead one loses it within ``lease_ttl``.
Taking it is re-entrant (``scripts.ACQUIRE``): after a Redis restart that kept the lease in its
AOF, the holder takes it straight back. A worker that loses it (a pause longer than the TTL)
finds out at its next renewal and stops; a write it had under way is a stale no-op of the
compare-and-set commit, so a lease only saves work, it never guards correctness.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import redis

from modelcompare.service.store.queue import Queue

log = logging.getLogger("modelcompare.worker")


class Lease:
    """A held lease (or claim); ``lost`` is set once a renewal finds another holder or none."""

    def __init__(self, renew: Callable[[], bool], ttl: float, name: str) -> None:
        self.renew, self.ttl, self.name = renew, ttl, name
        self.lost = threading.Event()
        self.done = threading.Event()

    def beat(self) -> None:
        while not self.done.wait(self.ttl / 3):
            try:
                if not self.renew():
                    self.lost.set()
                    return
            except redis.RedisError as exc:  # Redis away: the main loop sees it too
                log.warning("%s not renewed: %s", self.name, exc)


@contextlib.contextmanager
def kept(renew: Callable[[], bool], ttl: float, name: str) -> Iterator[Lease]:
    """Renew a lease (or a task claim) every ``ttl / 3`` from a thread while the block runs."""
    lease = Lease(renew, ttl, name)
    thread = threading.Thread(target=lease.beat, name=name, daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        lease.done.set()
        thread.join()


@contextlib.contextmanager
def held(queue: Queue, cid: str, ttl: float) -> Iterator[Lease | None]:
    """The comparison's lease while the block runs (None when another worker holds it);
    renewed in the background, released on the way out."""
    if not queue.acquire(cid, ttl):
        yield None
        return
    try:
        with kept(lambda: queue.renew(cid, ttl), ttl, f"lease-{cid}") as lease:
            yield lease
    finally:
        with contextlib.suppress(redis.RedisError):  # unreachable: it expires by itself
            queue.release(cid)
