"""The senders' side of the outbox on real Redis: a claimed delivery is due again only after
its lease (a sender that died mid-try leaves it to another), a settled one is gone, the hint
follows the next due time unless a commit wrote it since, and the sweep restores a hint that a
worker killed after its commit never wrote."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from service_server import LOCAL_REDIS, delete_prefix, local_redis_available

from modelcompare.service.events import EventRecord, event_id
from modelcompare.service.rules import When
from modelcompare.service.store.connection import Connection, SyncClient
from modelcompare.service.store.keys import Keys, index_key, webhooks_due_key
from modelcompare.service.store.outbox import Outbox
from modelcompare.service.webhooks.deliveries import DeliveryRecord, delivery_of, encode

WHEN = When.model_validate({"best_changed": {}})


@pytest.fixture
def store() -> Iterator[tuple[SyncClient, str]]:
    if not local_redis_available():
        pytest.skip("no Redis at 127.0.0.1:6379")
    prefix = f"mctest-{uuid.uuid4().hex[:10]}"
    client = Connection.detect(LOCAL_REDIS).sync_client()
    yield client, prefix
    client.close()
    delete_prefix(LOCAL_REDIS, prefix)


def waiting(client: SyncClient, prefix: str, cid: str, sequence: int,
            due_ms: int) -> DeliveryRecord:
    """A comparison with a delivery due at ``due_ms``, as a commit leaves it."""
    keys = Keys(prefix, cid)
    event = EventRecord(id=event_id(cid, sequence, "r"), comparison=cid, rule="r",
                        kind="fired", sequence=sequence, n_observations=sequence, time=0.0,
                        when=WHEN, for_chunks=1, stderrs=2.0, figures={})
    record = delivery_of(event, "https://example.com/hook", due_ms / 1000)
    client.hset(keys.meta, "version", 1)
    client.sadd(index_key(prefix), cid)
    client.hset(keys.outbox, record.id, encode(record))
    client.zadd(keys.outbox_due, {record.id: due_ms})
    return record


def test_a_claimed_delivery_is_due_again_after_its_lease(store: tuple[SyncClient, str]) -> None:
    client, prefix = store
    outbox = Outbox(client, prefix)
    now = int(time.time() * 1000)
    record = waiting(client, prefix, "c1", 1, now)
    client.zadd(webhooks_due_key(prefix), {"c1": now})
    assert outbox.due(now, 10) == [("c1", now)]
    first = outbox.claim("c1", now, now, lease_ms=200, limit=10)
    assert [d.id for d in first.deliveries] == [record.id] and first.secret.startswith("whsec_")
    assert first.next_due_ms == now + 200  # the lease
    assert outbox.due(now, 10) == []  # the hint moved past the lease
    assert outbox.claim("c1", now, now + 100, 200, 10).deliveries == []  # held by the lease
    again = outbox.claim("c1", now + 200, now + 200, 200, 10)  # the first sender died
    assert [d.id for d in again.deliveries] == [record.id] and again.secret == first.secret
    outbox.settle(record, "delivered", now, 10, now)
    assert outbox.claim("c1", now + 200, now + 10_000, 200, 10).deliveries == []
    assert client.hget(Keys(prefix, "c1").meta, "deliveries") == b"1"
    outbox.settle(record, "delivered", now, 10, now)  # settled twice: counted once
    assert client.hget(Keys(prefix, "c1").meta, "deliveries") == b"1"


def test_a_hint_written_since_the_claim_wins(store: tuple[SyncClient, str]) -> None:
    client, prefix = store
    outbox = Outbox(client, prefix)
    now = int(time.time() * 1000)
    waiting(client, prefix, "c1", 1, now)
    hint = webhooks_due_key(prefix)
    client.zadd(hint, {"c1": now - 5})  # what the sender read ...
    client.zadd(hint, {"c1": now})  # ... and what a commit wrote before the claim ended
    outbox.claim("c1", now - 5, now, 60_000, 10)
    assert client.zscore(hint, "c1") == now


def test_retry_and_dead_outcomes(store: tuple[SyncClient, str]) -> None:
    client, prefix = store
    outbox, keys = Outbox(client, prefix), Keys(prefix, "c1")
    now = int(time.time() * 1000)
    records = [waiting(client, prefix, "c1", sequence, now) for sequence in (1, 2, 3)]
    outbox.settle(records[0].failed(now / 1000, 500, "HTTP 500", 5.0), "retry", now + 5000,
                  2, now)
    assert client.zscore(keys.outbox_due, records[0].id) == now + 5000
    assert client.zscore(webhooks_due_key(prefix), "c1") == now  # the others are due now
    for i, record in enumerate(records):  # dead deliveries kept: the newest 2
        outbox.settle(record.failed(now / 1000, None, "x", None), "dead", now, 2, now + i)
    assert client.hlen(keys.outbox) == 0 and client.zcard(keys.outbox_due) == 0
    assert sorted(client.hkeys(keys.dead_deliveries)) == sorted(
        r.id.encode() for r in records[1:])


def test_the_sweep_restores_a_lost_hint(store: tuple[SyncClient, str]) -> None:
    client, prefix = store
    outbox = Outbox(client, prefix)
    now = int(time.time() * 1000)
    waiting(client, prefix, "c1", 1, now - 10)
    waiting(client, prefix, "c2", 1, now + 60_000)
    client.sadd(index_key(prefix), "c3")  # a comparison without deliveries
    assert outbox.due(now, 10) == []
    assert outbox.sweep() == 2
    assert outbox.due(now, 10) == [("c1", now - 10)]
    assert client.zscore(webhooks_due_key(prefix), "c2") == now + 60_000
