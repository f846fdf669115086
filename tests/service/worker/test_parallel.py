"""A comparison's models in parallel: workers share out each chunk's model updates, and the
result is bit-identical to one worker applying every model in turn; a helper that dies holding
a model's task is replaced once its claim lapses."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis
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

from modelcompare.estimators import EstimatorError
from modelcompare.service.engine import Runner
from modelcompare.service.poison import ChunkFailed
from modelcompare.service.store.keys import Keys
from modelcompare.service.store.tasks import Staged, TaskBoard
from modelcompare.service.store.trace import decode_point

SGAIS = {"particles": 16, "steps": 4, "hmc_moves": 1, "leapfrog_steps": 5}
ROWS, CHUNK = 160, 20


def serial_reference(server: Server, seed: int) -> str:
    """The comparison applied by one worker that computes every model itself."""
    store = server.redis()
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=seed, **SGAIS), ROWS, CHUNK)
    drain(make_worker(server, "serial", parallel_models=False), store,
          Keys(server.settings.key_prefix, cid), ROWS // CHUNK)
    return cid


def applied(store: redis.Redis, keys: Keys) -> tuple[Any, ...]:
    evidence = json.loads(store.get(keys.evidence))
    trace = [decode_point(p) for p in store.lrange(keys.trace, 0, -1)]
    return (states(store, keys), store.lrange(keys.blocks, 0, -1),
            evidence["models"],
            [(p["sequence"], p["models"]) for p in trace])


@pytest.mark.slow
def test_shared_model_updates_are_bit_identical_to_serial(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference = serial_reference(server, seed=21)
    real_update, real_stage = Runner.update, TaskBoard.stage
    staged: list[str] = []

    def slow_update(self: Runner, *args: Any) -> Any:
        time.sleep(0.03)  # long enough that the other worker picks up a model meanwhile
        return real_update(self, *args)

    def counted_stage(self: TaskBoard, cid: str, sequence: int, name: str,
                      result: Staged) -> None:
        staged.append(name)
        real_stage(self, cid, sequence, name, result)

    monkeypatch.setattr(Runner, "update", slow_update)
    monkeypatch.setattr(TaskBoard, "stage", counted_stage)
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=21, **SGAIS), ROWS, CHUNK)
    workers = [make_worker(server, f"parallel-{i}") for i in range(2)]
    run_until_applied(workers, store, Keys(prefix, cid), ROWS // CHUNK, timeout=120)
    assert staged, "no model update was computed by the helping worker"
    assert applied(store, Keys(prefix, cid)) == applied(store, Keys(prefix, reference))
    assert not store.exists(Keys(prefix, cid).tasks)  # the commit cleared the staged results


@pytest.mark.slow
def test_a_dead_helpers_model_is_computed_again(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference = serial_reference(server, seed=4)
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=4, **SGAIS), ROWS, CHUNK)
    keys = Keys(prefix, cid)
    dead = TaskBoard(store, prefix, "dead-helper")
    block = store.xrange(keys.stream, count=1)[0][1][b"block"]
    # the coordinator's task list: the costliest models first (4, 4 and 3 parameters)
    dead.open(cid, 1, block, ["right", "wrong_noise", "too_few"])
    assert dead.claim(cid, 1, ttl=1.5) == "right"  # ... and the helper dies here
    started = time.monotonic()
    drain(make_worker(server, "coordinator"), store, keys, 1)
    assert time.monotonic() - started >= 1.4  # it waited for the claim to lapse
    drain(make_worker(server, "coordinator"), store, keys, ROWS // CHUNK)
    assert applied(store, keys) == applied(store, Keys(prefix, reference))


@pytest.mark.slow
def test_one_heartbeat_keeps_every_task_a_helper_computes(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper's claims outlive their TTL while it computes, its first task's and the next's
    (one heartbeat renews whichever it holds): no other worker takes a model it is on."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=5, **SGAIS), ROWS, CHUNK)
    keys = Keys(prefix, cid)
    coordinator = TaskBoard(store, prefix, "coordinator")
    block = store.xrange(keys.stream, count=1)[0][1][b"block"]
    coordinator.open(cid, 1, block, ["right", "wrong_noise", "too_few"])
    real_update = Runner.update

    def slow_update(self: Runner, *args: Any) -> Any:
        time.sleep(1.0)  # twice the claim TTL (the lease TTL, 0.5 s)
        return real_update(self, *args)

    monkeypatch.setattr(Runner, "update", slow_update)
    helper = make_worker(server, "helper")
    helped: list[int] = []
    thread = threading.Thread(target=lambda: helped.append(helper.tasks.help(cid,
                                                                             threading.Event())))
    thread.start()
    time.sleep(0.75)  # the helper computes "right", its claim renewed past its TTL
    assert TaskBoard(store, prefix, "rival").claim(cid, 1, ttl=30) == "wrong_noise"
    time.sleep(1.0)  # now "too_few", claimed when "right" was staged
    assert TaskBoard(store, prefix, "late-rival").claim(cid, 1, ttl=30) is None
    thread.join()
    assert helped == [2]
    staged = coordinator.results(cid, 1, ["right", "wrong_noise", "too_few"])
    assert staged is not None and sorted(staged) == ["right", "too_few"]


def test_a_staged_failure_says_whether_the_budget_ran_out(start_server: StartServer) -> None:
    """A helper's failed update reaches the coordinator with its reason and whether it ran out
    of budget; only a failure that is each model's own names the models (service/poison.py)."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=4, **SGAIS), ROWS, CHUNK)
    block = store.xrange(Keys(prefix, cid).stream, count=1)[0][1][b"block"]
    board = TaskBoard(store, prefix, "helper")
    board.open(cid, 1, block, ["right", "wrong_noise"])
    slow = Staged(b"", None, "model 'right': BudgetExceeded: late", over_budget=True)
    broken = Staged(b"", None, "model 'wrong_noise': EstimatorError: broken")
    board.stage(cid, 1, "right", slow)
    board.stage(cid, 1, "wrong_noise", broken)
    results = board.results(cid, 1, ["right", "wrong_noise"])
    assert results == {"right": slow, "wrong_noise": broken}
    assert ChunkFailed.of(results).models == {}
    assert ChunkFailed.of({"wrong_noise": broken}).models == {"wrong_noise": broken.error}


@pytest.mark.slow
def test_a_model_that_fails_in_shared_updates_fails_alone(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers share each chunk's models; "too_few" raises on chunk 3 whichever worker
    computes it. After the attempts it fails there, and the other models' states are
    bit-identical to a serial run in which nothing failed (each update is a function of its
    model's state and of (seed, model, sequence) only)."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    reference = serial_reference(server, seed=9)
    real_update = Runner.update

    def failing_update(self: Runner, state: Any, rows: Any, history: Any, sequence: int,
                       *args: Any) -> Any:
        time.sleep(0.03)  # long enough that the other worker picks up a model meanwhile
        if self.name == "too_few" and sequence == 3:
            raise EstimatorError("injected: the particle covariance is not positive definite")
        return real_update(self, state, rows, history, sequence, *args)

    monkeypatch.setattr(Runner, "update", failing_update)
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=9, **SGAIS), ROWS, CHUNK)
    workers = [make_worker(server, f"parallel-{i}", poison_max_attempts=2) for i in range(2)]
    keys = Keys(prefix, cid)
    run_until_applied(workers, store, keys, ROWS // CHUNK, timeout=120)
    models = {m["name"]: m for m in json.loads(store.get(keys.evidence))["models"]}
    assert models["too_few"]["failed"].startswith("chunk 3: EstimatorError: injected")
    assert models["too_few"]["n_observations"] == 2 * CHUNK
    assert models["too_few"]["posterior_probability"] is None
    assert {models[n]["n_observations"] for n in ("right", "wrong_noise")} == {ROWS}
    done, serial = states(store, keys), states(store, Keys(prefix, reference))
    for name in (b"right", b"wrong_noise"):
        assert done[name] == serial[name]
    assert store.xlen(keys.dead_letters) == 0
