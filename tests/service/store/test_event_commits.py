"""Decision events are written by the worker's compare-and-set commit: a replayed commit writes
nothing, an event id is stored once whatever commit carries it again, and no more than
events_kept are kept (the oldest go)."""

from __future__ import annotations

import dataclasses

from service_helpers import comparison_body
from service_server import StartServer, create_and_ingest, drain, make_worker

from modelcompare.service.store.keys import Keys
from modelcompare.service.store.queue import APPLIED, STALE

RULE = {"name": "ahead", "when": {"log_bayes_factor": {
    "model": "right", "against": "wrong_noise", "above": 0.0}}}


def test_a_replayed_commit_stores_no_second_event(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        cid = create_and_ingest(client, {**comparison_body("exact"), "rules": [RULE]}, 40, 20)
    worker = make_worker(server, "w")
    store, keys = server.redis(), Keys(server.settings.key_prefix, cid)
    snap = worker.queue.snapshot(cid)
    assert snap is not None
    (entry,) = worker.queue.read(cid, 1)
    commit = worker.compute(cid, snap, entry)
    assert [e.id for e in commit.events] == [f"{cid}:1:ahead"]
    assert worker.queue.commit(cid, commit) == APPLIED
    assert worker.queue.commit(cid, commit) == STALE  # a retried commit: a no-op
    fresh = worker.queue.snapshot(cid)
    assert fresh is not None
    # a later commit that carries the same event again (as no worker does) stores it once
    again = dataclasses.replace(worker.compute(cid, fresh, None), events=commit.events)
    assert worker.queue.commit(cid, again) == APPLIED
    assert store.hlen(keys.events) == 1 and store.zcard(keys.event_order) == 1
    assert int(store.hget(keys.meta, "events")) == 1
    drain(worker, store, keys, 2)
    with server.client() as client:
        found = client.get(f"/v1/comparisons/{cid}/events").json()["events"]
    assert [(e["id"], e["kind"]) for e in found] == [(f"{cid}:1:ahead", "fired")]
    assert store.hget(keys.meta, "events") == b"1"


def test_past_events_kept_the_oldest_go(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    rules = [{"name": "up", "when": {"log_bayes_factor": {
        "model": "right", "against": "too_few", "above": -1e6}}},
             {"name": "down", "when": {"log_bayes_factor": {
                 "model": "too_few", "against": "right", "above": -1e6}}}]
    with server.client() as client:
        cid = create_and_ingest(client, {**comparison_body("exact"), "rules": rules}, 20, 20)
    worker = make_worker(server, "w", events_kept=1)
    store, keys = server.redis(), Keys(server.settings.key_prefix, cid)
    drain(worker, store, keys, 1)
    with server.client() as client:
        found = client.get(f"/v1/comparisons/{cid}/events").json()["events"]
    assert [e["id"] for e in found] == [f"{cid}:1:up"]  # of equal sequences, by id
    assert store.hget(keys.meta, "events") == b"2" and store.hlen(keys.events) == 1
