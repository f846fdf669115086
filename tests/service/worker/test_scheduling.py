"""Fair scheduling: a comparison whose every step fails outside the estimator (its history
cannot be loaded) neither holds the worker nor delays a healthy comparison, and ends degraded
with the reason after its attempt budget, with a dead letter."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from service_helpers import chunks, comparison_body, regression_data
from service_server import StartServer, make_worker

from modelcompare.service.scheduling import Schedule
from modelcompare.service.store.keys import Keys


@pytest.mark.slow
def test_a_failing_comparison_does_not_starve_a_healthy_one(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    worker = make_worker(server, "solo", poison_max_attempts=4)
    x, y = regression_data(300)
    with server.client() as client:
        failing, healthy = (str(client.post("/v1/comparisons", json=comparison_body()).json()["id"])
                            for _ in range(2))
        real_get = worker.cache.get

        def broken_cache(cid: str, *args: Any) -> Any:
            if cid == failing:
                raise MemoryError("injected: the history cache cannot allocate")
            return real_get(cid, *args)

        worker.cache.get = broken_cache  # type: ignore[method-assign]
        for chunk in chunks(x[:50], y[:50], 10):
            client.post(f"/v1/comparisons/{failing}/chunks", json=chunk)
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,))
        thread.start()
        sent: dict[int, float] = {}
        applied: dict[int, float] = {}
        try:
            for chunk in chunks(x, y, 10):
                reply = client.post(f"/v1/comparisons/{healthy}/chunks", json=chunk).json()
                sent[reply["sequence"]] = time.monotonic()
                for _ in range(10):  # a chunk every 0.1 s, watching what was applied
                    done = int(store.hget(Keys(prefix, healthy).meta, "sequence"))
                    for sequence in range(len(applied) + 1, done + 1):
                        applied[sequence] = time.monotonic()
                    time.sleep(0.01)
            deadline = time.monotonic() + 30
            while len(applied) < len(sent) and time.monotonic() < deadline:
                done = int(store.hget(Keys(prefix, healthy).meta, "sequence"))
                for sequence in range(len(applied) + 1, done + 1):
                    applied[sequence] = time.monotonic()
                time.sleep(0.01)
        finally:
            stop.set()
            thread.join()
        latencies = [applied[s] - sent[s] for s in sent]
        evidence = client.get(f"/v1/comparisons/{failing}/evidence").json()
        letters = client.get(f"/v1/comparisons/{failing}/dead-letters").json()["dead_letters"]
    assert len(latencies) == 30
    print(f"\nhealthy chunks applied in p50 {np.median(latencies):.3f} s, "
          f"p99 {np.percentile(latencies, 99):.3f} s")
    assert float(np.percentile(latencies, 99)) <= 2.0, latencies
    assert evidence["status"] == "degraded" and evidence["halted_at"] == 1
    assert "outside the estimator: MemoryError" in evidence["status_reason"]
    assert [(d["sequence"], d["attempts"], d["action"]) for d in letters] == [(1, 4, "halted")]


@pytest.mark.parametrize("failures", [1, 3])
def test_back_off_doubles_and_resets(failures: int) -> None:
    schedule = Schedule(first_delay=0.5, max_delay=1.5)
    delays = [schedule.failed("a") for _ in range(failures)]
    assert delays == [0.5, 1.0, 1.5][:failures]
    assert schedule.order(["a", "b"]) == ["b"]  # "a" waits
    schedule.succeeded("a")
    schedule.served("a")
    assert schedule.order(["a", "b", "c"]) == ["b", "c", "a"]  # round-robin after "a"
