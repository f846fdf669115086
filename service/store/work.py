"""How a worker finds work, on one node or across a cluster's shards, without polling every
comparison.

Everything that gives a comparison work publishes its id on the work channel (ingest, a model
added, a resume, a chunk's model updates opened for helpers): a plain ``PUBLISH``, which a
cluster delivers on every node. A worker stays subscribed and keeps the ids it heard of as
*candidates*; each pass reads the progress fields of the candidates only (one pipeline) and
forgets those with nothing left to do. A comparison another worker holds, or one backing off,
stays a candidate while it has work, so it is rechecked every pass: when its holder dies the
lease lapses and it is taken over within ``lease_ttl`` + ``poll_interval``, as before. An idle
worker with no candidates makes no Redis call; it sleeps on the channel.

A message can still be missed (the subscription dropped: Redis restarted, a node failed over,
its output buffer overflowed under a flood of messages). So a worker *sweeps*, reading the
index (one set, in pages) and then every comparison's progress fields in pipelines that a
cluster client splits by node: when it starts, after its subscription reconnects, after a
connection error, and every ``sweep_interval`` seconds (default 60) as a safety net. The lanes
of a worker process (service/lanes.py) share the periodic sweep: one lane makes it and offers
what it found to the others' finders (``peers``), whose own interval is infinite.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from modelcompare.service.store.connection import UNAVAILABLE, SyncClient, is_cluster
from modelcompare.service.store.keys import Keys, index_key, work_channel

log = logging.getLogger("modelcompare.work")

PROGRESS = ("sequence", "next_seq", "catching_up", "halted")
SWEEP_PAGE = 1000  # comparisons read per pipeline of a sweep
DRAIN_MAX = 10_000  # messages taken off the channel per pass, at most
# An idle wait listens in slices this long and looks at its stop event between them: a socket
# read cannot be interrupted from another thread, and a slice costs a select, no Redis call.
STOP_CHECK = 0.02


def index_pages(client: SyncClient, prefix: str, count: int = SWEEP_PAGE
                ) -> Iterator[list[str]]:
    """The comparison index, a page of ids at a time (SSCAN: an id in the index for the whole
    scan comes at least once)."""
    cursor = 0
    while True:
        cursor, members = client.sscan(index_key(prefix), cursor, count=count)
        if members:
            yield [member.decode() for member in members]
        if int(cursor) == 0:
            return


class WorkFinder:
    def __init__(self, client: SyncClient, prefix: str, sweep_interval: float = 60.0) -> None:
        self._client = client
        self._prefix = prefix
        self._pubsub: redis.client.PubSub | None = None
        self.sweep_interval = sweep_interval
        self.candidates: set[str] = set()
        self.known: set[str] = set()  # every comparison seen (swept or announced): a cluster
        # worker polls them while its channel or the index is on a master that is down
        self._scanned = False  # the live masters were scanned in this outage of the index
        self._quiet_until = 0.0  # time.monotonic() before which an outage is logged at debug
        self._next_sweep = 0.0  # time.monotonic() of the next sweep; 0: at the next pass
        self.sweeps = 0  # sweeps done (tests and benchmarks read it)
        self._hook: _Reconnected | None = None
        self.peers: list[WorkFinder] = []  # other lanes' finders, offered what a sweep finds
        self._offered: set[str] = set()  # what a peer's sweep found, taken at the next pass
        self._offered_lock = threading.Lock()

    def comparison_ids(self) -> list[str]:
        return sorted(m.decode() for m in self._client.smembers(index_key(self._prefix)))

    def add(self, cid: str) -> None:
        """Keep ``cid`` a candidate (e.g. a comparison left with work after a batch)."""
        self.candidates.add(cid)

    def offer(self, ids: set[str]) -> None:
        """Comparisons with work another lane's sweep found (called from its thread)."""
        with self._offered_lock:
            self._offered |= ids

    def resync(self) -> None:
        """Sweep at the next pass (after a connection error: messages may have been lost)."""
        self._next_sweep = 0.0

    def ready(self) -> list[str]:
        """Ids (sorted) of the candidates with chunks to apply or models catching up (not
        halted); the others stop being candidates. Takes the messages that arrived first, and
        sweeps when one is due."""
        with self._offered_lock:
            self.candidates |= self._offered
            self._offered = set()
        try:
            self._listen()
            self._drain(0.0)
            if time.monotonic() >= self._next_sweep:
                self.sweep()
        except UNAVAILABLE as exc:
            if not is_cluster(self._client):
                raise
            self._degraded(exc)
        ids = sorted(self.candidates)
        if not ids:
            return []
        progress = self._progress(ids)
        ready = [cid for cid in ids if cid in progress and has_work(*progress[cid])]
        self.known.difference_update(cid for cid, fields in progress.items() if fields[0] is None)
        # unreadable (their master down): still candidates, read again next pass
        self.candidates.intersection_update({*ready, *(set(ids) - set(progress))})
        return ready

    def _degraded(self, exc: Exception) -> None:
        """A cluster master is down: the work channel's (no message can be heard) or the
        index's. The comparisons on the other masters are still served: swept every pass
        while the channel is unheard, and when the index cannot be read either, every
        comparison known is polled, until the master returns (or a replica takes over)."""
        now = time.monotonic()
        say = log.warning if now >= self._quiet_until else log.debug
        self._quiet_until = max(self._quiet_until, now + 10.0)  # a warning per 10 s at most
        say("cluster master down (%s: %s): sweeping every pass", type(exc).__name__, exc)
        self.close()
        try:
            self.sweep()
        except UNAVAILABLE as index_down:
            if not self._scanned:  # once per outage: no comparison is created meanwhile
                self.known |= self._scan_live_masters()
                self._scanned = True
            say("comparison index unavailable (%s): polling the %d comparisons known",
                type(index_down).__name__, len(self.known))
            self.candidates |= self.known

    def _scan_live_masters(self) -> set[str]:
        """The comparisons whose keys live on the masters that answer (``SCAN`` of their meta
        keys, node by node): only while the index's master is down."""
        found: set[str] = set()
        pattern = Keys(self._prefix, "*").meta
        start = len(f"{self._prefix}:{{cmp:")
        for node in self._client.get_primaries():  # type: ignore[union-attr]
            with contextlib.suppress(*UNAVAILABLE, OSError):
                node_client = self._client.get_redis_connection(node)  # type: ignore[union-attr]
                for key in node_client.scan_iter(match=pattern, count=1000):
                    found.add(key.decode()[start:].split("}", 1)[0])
        return found

    def _progress(self, ids: list[str]) -> dict[str, list[Any]]:
        """The progress fields of ``ids``: one pipeline. In a cluster with a master down the
        pipeline fails as a whole; then each comparison is read alone and those on the dead
        master are left out."""
        pipe = self._client.pipeline(transaction=False)
        for cid in ids:
            pipe.hmget(Keys(self._prefix, cid).meta, *PROGRESS)
        try:
            return dict(zip(ids, pipe.execute(), strict=True))
        except UNAVAILABLE:
            if not is_cluster(self._client):
                raise
        progress: dict[str, list[Any]] = {}
        for cid in ids:
            with contextlib.suppress(*UNAVAILABLE):
                progress[cid] = self._client.hmget(Keys(self._prefix, cid).meta, *PROGRESS)
        return progress

    def sweep(self) -> int:
        """Read every comparison's progress; those with work become candidates. Returns how
        many have work."""
        self._next_sweep = time.monotonic() + self.sweep_interval
        self.sweeps += 1
        found: set[str] = set()
        for ids in index_pages(self._client, self._prefix):
            self._scanned = False  # the index answers: a later outage scans the masters again
            self.known.update(ids)
            progress = self._progress(ids)
            for cid in ids:
                if cid not in progress or has_work(*progress[cid]):  # unreadable: retried
                    self.candidates.add(cid)
                    found.add(cid)
        self._scanned = False
        for peer in self.peers:
            peer.offer(found)
        return len(found)

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Sleep until a comparison gets work, ``timeout`` seconds pass or ``stop`` is set
        (seen within ``STOP_CHECK`` seconds). A lost connection (e.g. the node it listened on
        failed over) is dropped here and opened anew next time, with a sweep."""
        self._listen()
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._drain(min(left, STOP_CHECK)):
                return

    def _listen(self) -> None:
        if self._pubsub is not None:
            return
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        # the connection holds its callbacks as weak methods: the hook lives with the finder
        self._hook = _Reconnected(self, pubsub.on_connect)
        pubsub.on_connect = self._hook.on_connect  # type: ignore[method-assign]
        try:
            pubsub.subscribe(work_channel(self._prefix))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            with contextlib.suppress(redis.RedisError, OSError):
                pubsub.close()
            raise
        self._pubsub = pubsub
        self.resync()  # subscribed first, then swept: nothing falls in between

    def _drain(self, timeout: float) -> bool:
        """Take the waiting messages (the first within ``timeout`` seconds) as candidates;
        whether any came."""
        assert self._pubsub is not None
        try:
            message = self._pubsub.get_message(timeout=timeout)
            came = message is not None
            for _ in range(DRAIN_MAX):
                if message is None:
                    return came
                if message.get("type") == "message":
                    data = message["data"]
                    cid = data.decode() if isinstance(data, bytes) else str(data)
                    self.candidates.add(cid)
                    self.known.add(cid)
                message = self._pubsub.get_message(timeout=0.0)
            return came
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.close()
            raise

    def close(self) -> None:
        self.resync()
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            try:
                pubsub.close()
            except (redis.RedisError, OSError) as exc:
                log.debug("closing the work subscription: %s", exc)


class _Reconnected:
    """The subscription's connect callback: it subscribes again, and asks for a sweep, since
    what was published while it was away is lost."""

    def __init__(self, finder: WorkFinder, resubscribe: Callable[..., Any]) -> None:
        self.finder, self.resubscribe = finder, resubscribe

    def on_connect(self, connection: Any) -> Any:
        self.finder.resync()
        return self.resubscribe(connection)


def has_work(sequence: bytes | None, ingested: bytes | None, catching: bytes | None,
             halted: bytes | None) -> bool:
    if sequence is None or ingested is None or halted is not None:
        return False
    return int(ingested) > int(sequence) or int(catching or 0) > 0
