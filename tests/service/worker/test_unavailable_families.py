"""A worker that lacks a comparison's model family (or has a version that cannot continue it)
leaves the comparison alone and says why: nothing claimed, counted or written but the waiting
record; the other comparisons are served; a worker that can serve it clears the record.

The comparisons are made through the API; then one stored model record is rewritten in Redis
to a family this process lacks, or to a version of modelcompare it cannot continue."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import pytest
import redis
import websockets
from service_helpers import chunks, regression_data
from service_server import Server, StartServer, drain, make_worker

from modelcompare.models.registry import families
from modelcompare.service.core.config import Settings
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.keys import GROUP, Keys
from modelcompare.service.store.queue import Queue
from modelcompare.service.store.tasks import TaskBoard
from modelcompare.service.store.waiting import Waiting, shown_status
from modelcompare.service.worker import Worker

BACKOFF = 0.5  # failure_backoff_max: the re-check period (the record lives three of them)
CHUNKS, ROWS = 3, 10
BODY = {"name": "robustness", "seed": 3, "estimator": {"method": "exact"}, "x_dim": 1,
        "models": [{"name": "line", "family": "linear_regression", "config": {"dim": 1}},
                   {"name": "robust", "family": "linear_regression",
                    "config": {"dim": 1, "noise_std": 2.0}}]}
OWN = families().known["linear_regression"].version
MISSING = ({"family": "student_t_regression", "package": "modelcompare-example-models"},
           "model 'robust': family 'student_t_regression' (modelcompare-example-models) is not "
           "installed here")
OTHER_MAJOR = ({"version": "99.0"},
               f"model 'robust': family 'linear_regression' needs modelcompare 99.0 or a later "
               f"99.x; this process has {OWN}")


def create(server: Server) -> str:
    """A comparison with ``CHUNKS`` chunks queued (no worker runs)."""
    x, y = regression_data(CHUNKS * ROWS)
    with server.client() as client:
        cid = str(client.post("/v1/comparisons", json=BODY).json()["id"])
        for chunk in chunks(x[:, :1], y, ROWS):
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
    return cid


def rewrite_robust(store: redis.Redis, keys: Keys, change: dict[str, Any]) -> bytes:
    """Change the stored record of model "robust"; returns the spec as it was."""
    original = store.hget(keys.meta, "spec")
    spec = json.loads(original)
    spec["models"][1].update(change)
    store.hset(keys.meta, "spec", json.dumps(spec))
    return original


def left_alone(metrics: Metrics, family: str) -> float:
    value = metrics.registry.get_sample_value("modelcompare_comparisons_left_alone_total",
                                              {"family": family})
    return value or 0.0


def status(server: Server, cid: str) -> dict[str, Any]:
    """The status and reason of ``cid`` in its description, the listing and its evidence."""
    with server.client() as client:
        described = client.get(f"/v1/comparisons/{cid}").json()
        (listed,) = [c for c in client.get("/v1/comparisons").json()["comparisons"]
                     if c["id"] == cid]
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
    return {where: (body["status"], body["status_reason"])
            for where, body in (("described", described), ("listed", listed),
                                ("evidence", evidence))}


def snapshot_status(server: Server, cid: str) -> tuple[str, str | None]:
    async def receive() -> dict[str, Any]:
        async with websockets.connect(f"{server.ws_url}/v1/comparisons/{cid}/ws") as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), 30))["evidence"]

    evidence = asyncio.run(receive())
    return evidence["status"], evidence["status_reason"]


@pytest.mark.parametrize(("change", "reason"), [MISSING, OTHER_MAJOR],
                         ids=["missing family", "other major version"])
def test_a_worker_leaves_alone_what_it_cannot_build(
    start_server: StartServer, caplog: pytest.LogCaptureFixture, change: dict[str, Any],
    reason: str,
) -> None:
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    served, alone = create(server), create(server)
    keys = Keys(prefix, alone)
    original = rewrite_robust(store, keys, change)
    family = change.get("family", "linear_regression")
    metrics = Metrics()
    worker = Worker(store, Settings(key_prefix=prefix, lease_ttl=0.5, poll_interval=0.05,
                                    failure_backoff_max=BACKOFF), "lacking", metrics)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="modelcompare.worker"):
        while int(store.hget(Keys(prefix, served).meta, "sequence")) < CHUNKS \
                or left_alone(metrics, family) < 3:
            assert time.monotonic() - started < 60, "the worker did not get there"
            if not worker.run_once():
                time.sleep(0.05)
    elapsed = time.monotonic() - started

    checks = left_alone(metrics, family)
    assert checks <= elapsed / BACKOFF + 1  # re-checked once per back-off, never in a loop
    assert store.hmget(keys.meta, "version", "sequence", "next_seq") == [b"0", b"0", b"3"]
    assert store.xlen(keys.stream) == CHUNKS
    assert store.xpending(keys.stream, GROUP)["pending"] == 0  # never read: all deliverable
    for untouched in (keys.attempts, keys.dead_letters, keys.tasks, keys.lease, keys.trace):
        assert not store.exists(untouched), untouched
    record = json.loads(store.get(keys.waiting))
    assert (record["reason"], record["worker"]) == (reason, "lacking")
    assert 0 < store.pttl(keys.waiting) <= 3 * BACKOFF * 1000
    shown = f"lacking cannot serve it: {reason}; its chunks wait for a worker that can"
    assert status(server, alone) == dict.fromkeys(("described", "listed", "evidence"),
                                                  ("waiting", shown))
    assert snapshot_status(server, alone) == ("waiting", shown)
    assert status(server, served) == dict.fromkeys(("described", "listed", "evidence"),
                                                   ("ok", None))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"comparison {alone} left alone: {reason}; a worker with it installed "
                        "will serve it"]

    store.hset(keys.meta, "spec", original)
    store.pexpire(keys.waiting, 60_000)  # gone below only because a commit deleted it
    drain(worker, store, keys, CHUNKS)
    assert not store.exists(keys.waiting)
    assert status(server, alone) == dict.fromkeys(("described", "listed", "evidence"),
                                                  ("ok", None))
    assert store.hgetall(keys.states) == store.hgetall(Keys(prefix, served).states)
    assert store.xlen(keys.stream) == 0 and not store.exists(keys.attempts)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_change_met_at_commit_is_checked_too(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec changes while the worker computes (as when a model is added): its commit is
    stale, and the snapshot it reads next has a model it cannot build, so it stops there,
    counting nothing; the chunks it had read are claimed by a worker that can serve them."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    cid = create(server)
    keys = Keys(prefix, cid)
    real_commit = Queue.commit
    originals: list[bytes] = []

    def commit_after_a_change(self: Queue, cid: str, commit: Any) -> int:
        monkeypatch.setattr(Queue, "commit", real_commit)
        originals.append(rewrite_robust(store, keys, MISSING[0]))
        store.hincrby(keys.meta, "version", 1)
        return real_commit(self, cid, commit)

    monkeypatch.setattr(Queue, "commit", commit_after_a_change)
    assert make_worker(server, "lacking").run_once() is False
    assert store.hmget(keys.meta, "version", "sequence") == [b"1", b"0"]
    assert not store.exists(keys.attempts) and not store.exists(keys.dead_letters)
    assert json.loads(store.get(keys.waiting))["reason"] == MISSING[1]
    store.hset(keys.meta, "spec", originals[0])
    drain(make_worker(server, "capable"), store, keys, CHUNKS)
    assert store.xlen(keys.stream) == 0 and not store.exists(keys.waiting)


def test_a_helper_passes_over_the_models_it_cannot_build(start_server: StartServer) -> None:
    """Another worker coordinates the chunk (it holds the lease and opened the model tasks); a
    helper lacking a family computes the models it can build and leaves the other unclaimed,
    writing and counting nothing against it."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    cid = create(server)
    keys = Keys(prefix, cid)
    rewrite_robust(store, keys, MISSING[0])
    assert Queue(store, prefix, "coordinator").acquire(cid, ttl=30)
    board = TaskBoard(store, prefix, "coordinator")
    block = store.xrange(keys.stream, count=1)[0][1][b"block"]
    assert board.open(cid, 1, block, ["robust", "line"])  # "robust" would be claimed first
    metrics = Metrics()
    helper = make_worker(server, "helper")
    helper.metrics = metrics
    assert helper.run_once() is True
    staged = board.results(cid, 1, ["robust", "line"])
    assert staged is not None and list(staged) == ["line"] and staged["line"].error is None
    assert store.hget(keys.tasks, "claim:robust") is None
    assert metrics.registry.get_sample_value("modelcompare_model_updates_helped_total") == 1.0
    assert helper.tasks.help(cid, threading.Event()) == 0  # nothing left it can build
    for untouched in (keys.attempts, keys.dead_letters, keys.waiting):
        assert not store.exists(untouched), untouched
    assert left_alone(metrics, "student_t_regression") == 0


def test_a_waiting_record_is_not_written_over_a_change(start_server: StartServer) -> None:
    """The record is written only at the version the worker read: not once another worker
    committed or a model was added or removed since, nor for a deleted comparison."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    cid = create(server)
    queue, why = Queue(store, prefix, "lacking"), Waiting("model 'robust': …", "lacking", 0.0)
    assert queue.leave_alone(cid, 1, why, ttl=30) is False
    assert not store.exists(Keys(prefix, cid).waiting)
    assert queue.leave_alone("no-such-comparison", 0, why, ttl=30) is False
    assert queue.leave_alone(cid, 0, why, ttl=30) is True
    assert Waiting.decode(store.get(Keys(prefix, cid).waiting)) == why


def test_degraded_wins_and_waiting_needs_queued_chunks() -> None:
    why = Waiting("model 'robust': family 'x' (pkg) is not installed here", "w-1", 0.0)
    shown = "w-1 cannot serve it: model 'robust': family 'x' (pkg) is not installed here; its " \
            "chunks wait for a worker that can"
    assert shown_status(None, why, queued=True) == ("waiting", shown)
    assert shown_status("halted on chunk 2", why, queued=True) == ("degraded",
                                                                   "halted on chunk 2")
    assert shown_status(None, why, queued=False) == ("ok", None)
    assert shown_status(None, None, queued=True) == ("ok", None)
