"""Workers: racing workers apply each chunk once; a worker killed between read and write is
recovered (XAUTOCLAIM) to the same bits; stale commits are no-ops (poison chunks:
test_poison.py)."""

from __future__ import annotations

import pytest
from service_helpers import comparison_body
from service_server import (
    Server,
    StartServer,
    create_and_ingest,
    drain,
    make_worker,
    run_until_applied,
    states,
)

from modelcompare.service.store.keys import GROUP, Keys
from modelcompare.service.store.queue import STALE

SGAIS = {"particles": 16, "steps": 4, "hmc_moves": 1, "leapfrog_steps": 5}  # cheap, still random


def reference_and_twin(server: Server, seed: int, rows: int, chunk: int,
                       without: str | None = None) -> tuple[str, str]:
    """Two comparisons fed the same chunks: the first drained by a lone worker (the reference,
    lacking the model ``without`` if one is named), the second left queued for the scenario
    under test."""
    store, prefix = server.redis(), server.settings.key_prefix
    body = comparison_body("sgais", seed=seed, **SGAIS)
    kept = {**body, "models": [m for m in body["models"] if m["name"] != without]}
    with server.client() as client:
        reference = create_and_ingest(client, kept, rows, chunk)
        drain(make_worker(server, "solo"), store, Keys(prefix, reference), rows // chunk)
        twin = create_and_ingest(client, body, rows, chunk)
    return reference, twin


@pytest.mark.slow
def test_two_racing_workers_apply_each_chunk_once(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference, raced = reference_and_twin(server, seed=11, rows=160, chunk=20)
    with server.client() as client:
        racers = [make_worker(server, f"racer-{i}", batch_chunks=1) for i in range(2)]
        # the commit script writes the applied sequence and the evidence together
        run_until_applied(racers, store, Keys(prefix, raced), 8, timeout=180)
        evidence = client.get(f"/v1/comparisons/{raced}/evidence").json()
        trace = client.get(f"/v1/comparisons/{raced}/history").json()["points"]
    keys = Keys(prefix, raced)
    assert evidence["n_observations"] == 160
    assert all(m["n_observations"] == 160 for m in evidence["models"])
    assert [p["sequence"] for p in trace] == list(range(1, 9))
    assert store.llen(keys.blocks) == 8
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
    assert states(store, keys) == states(store, Keys(prefix, reference))


@pytest.mark.slow
def test_killed_worker_is_recovered_to_the_same_bits(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference, cid = reference_and_twin(server, seed=3, rows=180, chunk=30)
    keys = Keys(prefix, cid)
    doomed = make_worker(server, "doomed")
    assert doomed.queue.acquire(cid, 0.5)
    snap = doomed.queue.snapshot(cid)
    assert snap is not None
    entries = doomed.queue.read(cid, 3)
    late_commit = doomed.compute(cid, snap, entries[0])  # ... and the worker dies here
    pending = store.xpending(keys.stream, GROUP)
    assert pending["pending"] == 3 and pending["consumers"][0]["name"] == b"doomed"
    assert int(store.hget(keys.meta, "sequence")) == 0

    rescuer = make_worker(server, "rescuer")
    drain(rescuer, store, keys, 6)
    assert states(store, keys) == states(store, Keys(prefix, reference))
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
    assert store.xlen(keys.stream) == 0
    assert [int(s) for s in store.hmget(keys.meta, "sequence", "version")] == [6, 6]

    before = (states(store, keys), store.get(keys.evidence), store.llen(keys.blocks))
    assert doomed.queue.commit(cid, late_commit) == STALE  # the late write is a no-op
    assert (states(store, keys), store.get(keys.evidence), store.llen(keys.blocks)) == before


@pytest.mark.slow
def test_a_worker_ahead_of_the_store_drops_no_chunk(start_server: StartServer) -> None:
    """A Redis failover can lose the last commits (replication is asynchronous) while a worker
    holds a snapshot read before it: chunks at or below that snapshot's sequence look
    redelivered. They are acknowledged only where the store has applied them; the others stay
    queued and are applied, to the bits of an undisturbed twin."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference, cid = reference_and_twin(server, seed=5, rows=90, chunk=30)
    keys = Keys(prefix, cid)
    worker = make_worker(server, "ahead", batch_chunks=1)
    read = worker.queue.snapshot
    ahead = read(cid)
    assert ahead is not None and ahead.sequence == 0
    ahead.sequence = 2  # what the lost commits had written
    snapshots = iter([ahead])
    worker.queue.snapshot = lambda c: next(snapshots, None) or read(c)  # type: ignore[method-assign]
    assert not worker.run_once()
    assert store.xlen(keys.stream) == 3 and int(store.hget(keys.meta, "sequence")) == 0
    drain(worker, store, keys, 3)
    assert states(store, keys) == states(store, Keys(prefix, reference))
    assert store.xlen(keys.stream) == 0


@pytest.mark.slow
def test_a_commit_computed_before_a_model_was_removed_is_stale(start_server: StartServer) -> None:
    """A worker's commit carries every model of its snapshot: once a model is removed the
    commit must not land (it would write the removed model's state back). It is a no-op, and the
    chunk is computed again without the model, to the bits of a comparison that never had it."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference, cid = reference_and_twin(server, seed=3, rows=60, chunk=30, without="too_few")
    keys = Keys(prefix, cid)
    with server.client() as client:
        slow = make_worker(server, "slow")
        assert slow.queue.acquire(cid, 0.5)
        snap = slow.queue.snapshot(cid)
        assert snap is not None
        late_commit = slow.compute(cid, snap, slow.queue.read(cid, 1)[0])
        assert client.delete(f"/v1/comparisons/{cid}/models/too_few").status_code == 200
        before = (states(store, keys), store.get(keys.evidence))
        assert slow.queue.commit(cid, late_commit) == STALE
        assert (states(store, keys), store.get(keys.evidence)) == before
        slow.queue.release(cid)
    drain(make_worker(server, "next"), store, keys, 2)
    assert states(store, keys) == states(store, Keys(prefix, reference))
