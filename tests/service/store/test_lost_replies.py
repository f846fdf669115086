"""Writes whose Redis reply is lost: the API re-sends them under the request's identity, so each
takes effect once and the answer says what is true (docs/design/exactly-once.md)."""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from service_helpers import chunks, comparison_body, regression_data
from service_server import LOCAL_REDIS, RunningServer, delete_prefix, local_redis_available

from modelcompare.service.core.config import Settings
from modelcompare.service.store import scripts
from modelcompare.service.store.connection import Connection, SyncClient
from modelcompare.service.store.keys import Keys

sys.path.append(str(Path(__file__).resolve().parents[2] / "faults"))
from reply_dropper import DropRule, ReplyDropper

pytestmark = pytest.mark.skipif(not local_redis_available(), reason="no Redis at 6379")


def marker(script: str) -> bytes:
    """What identifies a script on the wire: redis-py sends it as EVALSHA <sha1>."""
    return hashlib.sha1(script.encode()).hexdigest().encode()


@contextmanager
def api_behind(rule: DropRule) -> Iterator[tuple[httpx.Client, SyncClient, str]]:
    """An API (no worker) whose Redis connections go through a proxy that loses replies by
    ``rule``; yields its HTTP client, a direct Redis client and the key prefix."""
    proxy = ReplyDropper(("127.0.0.1", 6379), rule)
    prefix = f"mctest-{uuid.uuid4().hex[:10]}"
    running = RunningServer(Settings(redis_url=proxy.url, key_prefix=prefix,
                                     embedded_worker=False, poll_interval=0.1))
    try:
        with httpx.Client(base_url=running.handle.url, timeout=60) as client:
            yield client, Connection.detect(LOCAL_REDIS).sync_client(), prefix
    finally:
        running.stop()
        proxy.close()
        delete_prefix(LOCAL_REDIS, prefix)


@pytest.mark.slow
def test_keyless_chunks_with_lost_replies_are_recorded_once_and_answered_202() -> None:
    rule = DropRule(marker(scripts.INGEST), every=4, limit=5)
    x, y = regression_data(200)
    with api_behind(rule) as (client, store, prefix):
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        answers = [client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
                   for chunk in chunks(x, y, 10)]
        keys = Keys(prefix, cid)
        assert rule.dropped == 5
        assert [a.status_code for a in answers] == [202] * 20
        assert [a.json() for a in answers] == [
            {"sequence": n, "rows": 10, "duplicate": False} for n in range(1, 21)]
        assert int(store.hget(keys.meta, "next_seq")) == 20
        assert sum(int(f[b"rows"]) for _, f in store.xrange(keys.stream)) == 200


def test_a_keyed_chunk_with_a_lost_reply_is_not_called_a_duplicate() -> None:
    rule = DropRule(marker(scripts.INGEST), every=1, limit=1)
    x, y = regression_data(10)
    with api_behind(rule) as (client, store, prefix):
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        (chunk,) = chunks(x, y, 10)
        first = client.post(f"/v1/comparisons/{cid}/chunks", json=chunk,
                            headers={"Idempotency-Key": "k"})
        assert rule.dropped == 1
        # The client's key recorded the chunk on the lost run: the re-send finds it under the
        # same key, as a client's own retry would.
        assert first.status_code == 202
        assert first.json()["sequence"] == 1
        assert int(store.hget(Keys(prefix, cid).meta, "next_seq")) == 1


@pytest.mark.parametrize("lost", ["create", "add", "remove", "resume", "delete"])
def test_writes_with_a_lost_reply_take_effect_once_and_say_so(lost: str) -> None:
    script = {"create": scripts.CREATE, "add": scripts.ADD_MODEL,
              "remove": scripts.REMOVE_MODEL, "resume": scripts.RESUME,
              "delete": scripts.DELETE}[lost]
    rule = DropRule(marker(script), every=1, limit=1)
    with api_behind(rule) as (client, store, prefix):
        created = client.post("/v1/comparisons", json=comparison_body())
        assert created.status_code == 201
        cid = created.json()["id"]
        keys = Keys(prefix, cid)
        path = f"/v1/comparisons/{cid}"
        if lost == "add":
            added = client.post(f"{path}/models", json={"name": "third",
                                                        "family": "linear_regression",
                                                        "config": {"dim": 1}})
            assert added.status_code == 201, added.text
            assert [m["name"] for m in client.get(path).json()["models"]] == [
                "right", "too_few", "wrong_noise", "third"]
            assert int(store.hget(keys.meta, "version")) == 1
        if lost == "remove":
            removed = client.delete(f"{path}/models/too_few")
            assert removed.status_code == 200, removed.text
            assert [m["name"] for m in client.get(path).json()["models"]] == [
                "right", "wrong_noise"]
            assert int(store.hget(keys.meta, "version")) == 1
        if lost == "resume":
            store.hset(keys.meta, "halted", 1)
            resumed = client.post(f"{path}/resume", json={"action": "skip"})
            assert resumed.status_code == 200, resumed.text
            assert store.hget(keys.meta, "halted") is None
            assert store.hget(keys.meta, "skip") == b"1"
            assert int(store.hget(keys.meta, "version")) == 1
        if lost == "delete":
            assert client.delete(path).status_code == 204
            assert client.get(path).status_code == 404
            assert list(store.scan_iter(match=keys.pattern)) == []
        assert rule.dropped == 1
