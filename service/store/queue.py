"""What a worker does in Redis: leases, reading chunks (consumer group, XAUTOCLAIM), commits."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from typing import Any

import redis

from modelcompare.service.events import encode as encode_event
from modelcompare.service.migration import progress_from_body
from modelcompare.service.progress import current, encode
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store import scripts
from modelcompare.service.store.connection import SyncClient, is_cluster, publish_command
from modelcompare.service.store.keys import GROUP, Keys, webhooks_due_key
from modelcompare.service.store.trace import encode_point
from modelcompare.service.store.waiting import Waiting
from modelcompare.service.store.work_records import (
    Commit,
    Entry,
    Retention,
    Snapshot,
    Stored,
)
from modelcompare.service.webhooks.deliveries import encode as encode_delivery
from modelcompare.service.webhooks.deliveries import outbox_full

log = logging.getLogger("modelcompare.worker")

APPLIED, STALE, GONE = 1, 0, -1


class Queue:
    """Redis side of a worker (synchronous client)."""

    def __init__(self, client: SyncClient, prefix: str, consumer: str | None = None,
                 retention: Retention | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.retention = retention or Retention()
        # host and pid in the name: an operator (or benchmarks/recovery.py) can tell which
        # process holds a lease or owns a pending entry
        self.consumer = consumer or (
            f"worker-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        self._publish = publish_command(client)
        self._commit = client.register_script(scripts.COMMIT)
        self._acquire = client.register_script(scripts.ACQUIRE)
        self._renew = client.register_script(scripts.RENEW)
        self._release = client.register_script(scripts.RELEASE)
        self._prune = client.register_script(scripts.PRUNE_CONSUMERS)
        self._leave_alone = client.register_script(scripts.LEAVE_ALONE)
        self._ack_applied = client.register_script(scripts.ACK_APPLIED)
        self._record_failure = client.register_script(scripts.RECORD_FAILURE)

    def keys(self, cid: str) -> Keys:
        return Keys(self.prefix, cid)

    def acquire(self, cid: str, ttl: float) -> bool:
        """Take the comparison's lease for ``ttl`` seconds, or extend it if it is already ours
        (False: another worker holds it, or the comparison is gone)."""
        keys = self.keys(cid)
        return bool(self._acquire(keys=[keys.lease, keys.meta], args=[self.consumer, _ms(ttl)]))

    def renew(self, cid: str, ttl: float) -> bool:
        return bool(self._renew(keys=[self.keys(cid).lease], args=[self.consumer, _ms(ttl)]))

    def release(self, cid: str) -> None:
        self._release(keys=[self.keys(cid).lease], args=[self.consumer])

    def prune_consumers(self, cid: str, idle: float) -> list[str]:
        """Remove the comparison's consumers idle over ``idle`` seconds that own nothing."""
        try:
            removed = self._prune(keys=[self.keys(cid).stream], args=[GROUP, _ms(idle),
                                                                      self.consumer])
        except redis.ResponseError:  # the stream is gone (comparison deleted meanwhile)
            return []
        return [name.decode() for name in removed]

    def prune_consumers_many(self, cids: list[str], idle: float,
                             page: int = 500) -> dict[str, list[str]]:
        """``prune_consumers`` of each comparison, pipelined ``page`` at a time on one node (a
        cluster runs them one by one); only comparisons that lost a consumer are returned."""
        if is_cluster(self.client):
            found = {cid: self.prune_consumers(cid, idle) for cid in cids}
            return {cid: names for cid, names in found.items() if names}
        removed: dict[str, list[str]] = {}
        for start in range(0, len(cids), page):
            part = cids[start:start + page]
            pipe = self.client.pipeline(transaction=False)
            for cid in part:
                self._prune(keys=[self.keys(cid).stream],
                            args=[GROUP, _ms(idle), self.consumer], client=pipe)
            for cid, result in zip(part, pipe.execute(raise_on_error=False), strict=True):
                if isinstance(result, redis.ResponseError):
                    continue  # the stream is gone (comparison deleted meanwhile)
                if isinstance(result, Exception):
                    raise result
                if result:
                    removed[cid] = [name.decode() for name in result]
        return removed

    def snapshot(self, cid: str) -> Snapshot | None:
        """The comparison at its current version, read in one transaction; None once it is
        gone. The evidence body is read only where no progress record is stored at that
        version (service/migration.py): the record is built from it, once."""
        keys = self.keys(cid)
        stored = self._read(keys, keys.progress)
        progress = None if stored is None else current(stored.record, stored.version)
        if stored is not None and progress is None:
            stored = self._read(keys, keys.evidence)
            if stored is not None and stored.record is not None:
                progress = progress_from_body(json.loads(stored.record))
        if stored is None or progress is None:
            return None
        return Snapshot(spec=stored.spec, version=stored.version, sequence=stored.sequence,
                        progress=progress, states=stored.states, halted=stored.halted,
                        skip=stored.skip)

    def _read(self, keys: Keys, record: str) -> Stored | None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(keys.meta, "spec", "version", "sequence", "halted", "skip")
        pipe.get(record)
        pipe.hgetall(keys.states)
        (spec, version, sequence, halted, skip), raw, states = pipe.execute()
        if spec is None:
            return None
        return Stored(ComparisonSpec.model_validate_json(spec), int(version), int(sequence),
                      int(halted or 0), int(skip or 0), raw,
                      {name.decode(): data for name, data in states.items()})

    def spec(self, cid: str) -> ComparisonSpec | None:
        raw = self.client.hget(self.keys(cid).meta, "spec")
        return None if raw is None else ComparisonSpec.model_validate_json(raw)

    def leave_alone(self, cid: str, version: int, why: Waiting, ttl: float) -> bool:
        """Record why this worker leaves the comparison alone, for ``ttl`` seconds; False
        (nothing written) when it changed since ``version`` was read, or is gone."""
        keys = self.keys(cid)
        return bool(self._leave_alone(keys=[keys.meta, keys.waiting],
                                      args=[version, why.encode(), _ms(ttl)]))

    def record_failure(self, cid: str, sequence: int) -> int | None:
        """Count a failed update of chunk ``sequence``; returns its failures so far, or None
        (nothing written) when the comparison is gone."""
        keys = self.keys(cid)
        attempts = int(self._record_failure(keys=[keys.meta, keys.attempts], args=[sequence]))
        return None if attempts < 0 else attempts

    def claim(self, cid: str, count: int) -> list[Entry]:
        """Entries read but never acknowledged by any consumer (a dead worker's), now ours."""
        entries: list[Entry] = []
        start = "0-0"
        while True:
            reply = self.client.xautoclaim(
                self.keys(cid).stream, GROUP, self.consumer, 0, start_id=start, count=count
            )
            next_id, claimed = reply[0], reply[1]
            entries.extend(_entry(entry_id, fields) for entry_id, fields in claimed if fields)
            if next_id in (b"0-0", "0-0"):
                return sorted(entries, key=lambda e: e.sequence)
            start = next_id

    def read(self, cid: str, count: int) -> list[Entry]:
        """New entries for this consumer (non-blocking)."""
        reply = self.client.xreadgroup(GROUP, self.consumer, {self.keys(cid).stream: ">"}, count)
        return [_entry(entry_id, fields) for _, items in reply for entry_id, fields in items]

    def ack_applied(self, cid: str, entry: Entry) -> bool:
        """Acknowledge and delete a redelivered ``entry``, one the stored comparison has applied
        (``scripts.ACK_APPLIED``); False where it has not, or is gone: the caller's snapshot is
        ahead of the store and must be read again."""
        keys = self.keys(cid)
        return self._ack_applied(keys=[keys.meta, keys.stream],
                                 args=[GROUP, entry.id, entry.sequence]) == 1

    def commit(self, cid: str, commit: Commit) -> int:
        """One atomic compare-and-set step: states, evidence, trace, block, ack, publish, the
        dead letter of a chunk given up on, the events of decision rules with their webhook
        deliveries (kept as ``retention`` says); the waiting record goes."""
        keys = self.keys(cid)
        pairs: list[Any] = []
        for name, data in commit.states.items():
            pairs += [name, data]
        now = time.time()
        deliveries = {delivery.id: delivery for delivery in commit.deliveries}
        events: list[Any] = []
        for event in commit.events:
            delivery = deliveries.get(event.id)
            events += [event.id, event.sequence, encode_event(event)]
            events += ["", ""] if delivery is None else [
                encode_delivery(delivery),
                encode_delivery(outbox_full(delivery, now, self.retention.outbox))]
        dead = commit.dead_letter
        result = self._commit(
            keys=[keys.meta, keys.states, keys.evidence, keys.trace, keys.blocks, keys.stream,
                  keys.dead_letters, keys.attempts, keys.tasks, keys.tasks_done, keys.waiting,
                  keys.progress, keys.events, keys.event_order, keys.outbox, keys.outbox_due,
                  keys.dead_deliveries, keys.dead_delivery_order],
            args=[
                commit.version,
                commit.sequence,
                commit.block,
                GROUP,
                commit.entry_id,
                json.dumps(commit.evidence, allow_nan=False),
                "" if commit.trace is None else encode_point(commit.trace),
                keys.updates,
                commit.progress.catching_up,
                commit.progress.status_reason or "",
                int(commit.halt),
                "" if dead is None else dead.error or "error",
                0 if dead is None else dead.attempts,
                "" if dead is None else dead.action,
                b"" if dead is None else dead.block,
                repr(time.time()),
                self._publish,
                encode(commit.progress),
                self.retention.events,
                self.retention.outbox,
                self.retention.dead_deliveries,
                int(now * 1000),
                len(events),
                *events,
                *pairs,
            ],
        )
        if result == APPLIED and deliveries:
            self._hint_deliveries(cid, now)
        return int(result)

    def _hint_deliveries(self, cid: str, now: float) -> None:
        """Tell the webhook senders the comparison has deliveries due. Lost when Redis fails
        here: the senders' sweep finds them (service/webhooks/sender.py)."""
        try:
            self.client.zadd(webhooks_due_key(self.prefix), {cid: int(now * 1000)})
        except redis.RedisError as exc:
            log.warning("comparison %s: webhook deliveries committed, their hint not written "
                        "(%s); the senders' sweep finds them", cid, exc)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _entry(entry_id: bytes | str, fields: dict[bytes, bytes]) -> Entry:
    return Entry(
        id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        sequence=int(fields[b"sequence"]),
        block=fields[b"block"],
    )
