"""Idle workers sleep on the work channel instead of reading every comparison: they pick up
work as it is announced, read nothing while idle (a slow safety sweep aside), find what they
missed in a sweep, and take over a dead worker's comparison once its lease lapses."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest
from service_helpers import chunks, comparison_body, regression_data
from service_server import Server, StartServer

from modelcompare.service.core.config import Settings
from modelcompare.service.store.keys import Keys
from modelcompare.service.store.work import WorkFinder
from modelcompare.service.worker import Worker


def _worker(server: Server, name: str, **overrides: object) -> Worker:
    settings = Settings(key_prefix=server.settings.key_prefix, **{
        "lease_ttl": 0.5, "poll_interval": 0.05, **overrides})
    return Worker(server.redis(), settings, consumer=name)


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        stop.set()
        thread.join(timeout=30)


def _commands(server: Server) -> int:
    return int(server.redis().info("stats")["total_commands_processed"])


def _applied(server: Server, cid: str) -> int:
    return int(server.redis().hget(Keys(server.settings.key_prefix, cid).meta, "sequence"))


def _until(check: object, timeout: float) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.01)
    return time.monotonic() - started


@pytest.mark.slow
def test_an_idle_worker_reads_no_comparison(start_server: StartServer) -> None:
    """50 idle comparisons, a worker waking every 0.05 s: after its first sweep it sends Redis
    next to nothing (a wake-up reads no comparison and no index)."""
    server = start_server("embedded", embedded_worker=False)
    with server.client() as client:
        for i in range(50):
            client.post("/v1/comparisons", json={**comparison_body(), "name": f"idle{i}"})
    worker = _worker(server, "idle", work_sweep_interval=600.0)
    with running(worker):
        _until(lambda: worker.work.sweeps == 1, 10)
        time.sleep(0.2)
        before = _commands(server)
        time.sleep(1.0)  # some 20 wake-ups
        sent = _commands(server) - before
    assert worker.work.sweeps == 1
    assert sent < 10, sent  # (INFO itself counts one)


def test_work_is_picked_up_when_announced_not_polled(start_server: StartServer) -> None:
    """With a poll interval of 30 s, chunks are still applied within a second or so: the
    ingest's message wakes the worker, for a comparison made before it started and after."""
    server = start_server("embedded", embedded_worker=False)
    x, y = regression_data(40, seed=1)
    with server.client() as client:
        early = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        worker = _worker(server, "quick", poll_interval=30.0, work_sweep_interval=600.0)
        with running(worker):
            _until(lambda: worker.work.sweeps == 1, 10)
            time.sleep(0.1)  # asleep on the channel now
            late = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
            for cid in (early, late):
                for chunk in chunks(x, y, 20):
                    assert client.post(f"/v1/comparisons/{cid}/chunks",
                                       json=chunk).status_code == 202
            seconds = _until(lambda: _applied(server, early) == _applied(server, late) == 2, 20)
            assert seconds < 5.0  # < the poll interval: woken, not polled
            assert worker.work.sweeps == 1


@pytest.mark.slow
def test_a_missed_message_is_found_by_the_sweep(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    x, y = regression_data(20, seed=2)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        finder = WorkFinder(server.redis(), server.settings.key_prefix, sweep_interval=0.3)
        assert finder.ready() == [] and finder.sweeps == 1
        assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunks(x, y, 20)[0]
                           ).status_code == 202
        _until(lambda: cid in finder.ready(), 5)
        assert finder.sweeps == 1  # heard, not swept
        finder.candidates.clear()  # as if the message had been lost
        assert finder.ready() == []
        time.sleep(0.35)
        assert finder.ready() == [cid] and finder.sweeps == 2
        finder.close()  # a reconnect sweeps at once
        assert finder.ready() == [cid] and finder.sweeps == 3
        finder.close()


def test_the_lanes_of_a_process_share_one_periodic_sweep(start_server: StartServer) -> None:
    """Lane 0 makes the periodic sweep and offers what it found to the other lanes, whose own
    interval is infinite (they sweep only on connecting)."""
    from modelcompare.service.worker_process import WorkerProcess

    server = start_server("local", embedded_worker=False)
    x, y = regression_data(20, seed=5)
    settings = Settings(key_prefix=server.settings.key_prefix, worker_lanes=3)
    first, *others = (worker.work for worker in WorkerProcess(server.redis(), settings).workers)
    assert first.peers == others
    assert all(finder.sweep_interval == float("inf") for finder in others)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunks(x, y, 20)[0]
                           ).status_code == 202
    assert first.sweep() == 1
    for finder in others:
        assert finder.ready() == [cid] and finder.sweeps == 1  # its own first sweep, and the offer
        finder.candidates.clear()  # as if its message had been lost
        assert finder.ready() == [] and finder.sweeps == 1
    first.sweep()
    assert all(finder.ready() == [cid] and finder.sweeps == 1 for finder in others)
    for finder in (first, *others):
        finder.close()


@pytest.mark.slow
def test_a_dead_workers_comparison_is_taken_over_without_a_sweep(
        start_server: StartServer) -> None:
    """Worker A holds the lease and has read the chunks (pending, unacknowledged), then dies.
    Worker B heard of the chunks, finds the lease taken, keeps the comparison as a candidate,
    and applies every chunk within about a lease TTL of A's death, with no sweep."""
    server = start_server("local", embedded_worker=False)
    x, y = regression_data(60, seed=3)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        dead = _worker(server, "dead")
        assert dead.queue.acquire(cid, 0.5)
        helper = _worker(server, "heir", poll_interval=0.05, work_sweep_interval=600.0)
        with running(helper):
            _until(lambda: helper.work.sweeps == 1, 10)
            for chunk in chunks(x, y, 20):
                assert client.post(f"/v1/comparisons/{cid}/chunks",
                                   json=chunk).status_code == 202
            assert len(dead.queue.read(cid, 16)) == 3  # pending for the dead worker
            died = time.monotonic()  # it renews no more: the lease lapses in 0.5 s
            _until(lambda: _applied(server, cid) == 3, 20)
            taken_over = time.monotonic() - died
            assert helper.work.sweeps == 1
    assert taken_over < 3.0, taken_over
    pending = server.redis().xpending(Keys(server.settings.key_prefix, cid).stream, "workers")
    assert pending["pending"] == 0


@pytest.mark.e2e
def test_a_stopped_idle_worker_ends_without_waiting_out_its_poll_interval(
    start_server: StartServer,
) -> None:
    """Asleep on the channel with a 30 s poll interval, a worker whose stop is set returns
    within a fraction of a second: a shutdown never waits out the wait."""
    server = start_server("embedded", embedded_worker=False)
    worker = _worker(server, "sleeper", poll_interval=30.0, work_sweep_interval=600.0)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    _until(lambda: worker.work.sweeps == 1, 10)
    time.sleep(0.2)  # asleep on the channel now
    stopped = time.monotonic()
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert time.monotonic() - stopped < 0.5


@pytest.mark.slow  # a real deployment watched idle for 5 s: 12 s
def test_an_idle_worker_process_costs_little_cpu(tmp_path: Path) -> None:
    """A real `modelcompare worker` process beside 300 idle comparisons: under 3 % of a core
    while idle, and a chunk sent then is applied well within a second or two."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
    from fault_processes import Deployment

    deployment = Deployment(tmp_path, workers=1)
    deployment.start()
    try:
        x, y = regression_data(20, seed=4)
        with httpx.Client(base_url=deployment.api.url, timeout=60) as client:
            ids = [client.post("/v1/comparisons", json={**comparison_body(), "name": f"i{i}"}
                               ).json()["id"] for i in range(300)]
            process = deployment.workers[0].process
            assert process is not None
            usage = psutil.Process(process.pid)
            time.sleep(1.0)
            before, started = usage.cpu_times(), time.monotonic()
            time.sleep(5.0)
            after = usage.cpu_times()
            busy = (after.user + after.system - before.user - before.system)
            assert busy / (time.monotonic() - started) < 0.03
            sent = time.monotonic()
            reply = client.post(f"/v1/comparisons/{ids[0]}/chunks?wait=true",
                                json=chunks(x, y, 20)[0])
            assert reply.status_code == 200 and reply.json()["sequence"] == 1
            assert time.monotonic() - sent < 5.0
    finally:
        deployment.stop()
