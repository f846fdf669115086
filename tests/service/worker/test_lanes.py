"""Lanes (service/lanes.py): the express lane serves comparisons of cheap updates, hands a
costly one to the other lanes without costing its chunk an attempt or changing a bit of what
is computed, and keeps serving cheap ones while a general lane is busy."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from service_helpers import comparison_body
from service_server import StartServer, create_and_ingest, drain, make_worker, states

import modelcompare.service.engine
from modelcompare.estimators import Deadline, Progress, Rows
from modelcompare.estimators.deadline import check_deadline
from modelcompare.service.core.config import Settings
from modelcompare.service.engine import Runner
from modelcompare.service.lanes import CostBook, Lane, lane_settings, lanes_of
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.keys import Keys
from modelcompare.service.worker import Worker
from modelcompare.service.worker_process import WorkerProcess

SGAIS = {"particles": 16, "steps": 4, "hmc_moves": 1, "leapfrog_steps": 5}


def test_the_express_lane_admits_the_unmeasured_and_the_cheap_only() -> None:
    book = CostBook()
    express, general = Lane(0, 0.5, book), Lane(1, None, book)
    assert express.admits("new") and express.cutoff == 0.5
    book.record("cheap", 0.5)
    book.record("costly", 0.51)
    assert express.admits("cheap") and not express.admits("costly")
    express.hand_over("cheap")
    assert not express.admits("cheap")
    assert all(general.admits(cid) for cid in ("new", "cheap", "costly"))
    assert general.cutoff == math.inf
    book.forget("costly")
    assert express.admits("costly")


def test_lanes_share_one_book_and_the_history_cache() -> None:
    settings = Settings(worker_lanes=3, express_lane_seconds=0.25, history_cache=16,
                        history_cache_bytes=3000)
    lanes = lanes_of(settings)
    assert [(lane.index, lane.express_seconds) for lane in lanes] == [(0, 0.25), (1, None),
                                                                     (2, None)]
    assert lanes[0].book is lanes[1].book is lanes[2].book
    shared = lane_settings(settings)
    assert (shared.history_cache, shared.history_cache_bytes) == (5, 1000)
    alone = lanes_of(Settings(worker_lanes=1))
    assert len(alone) == 1 and not alone[0].express


def express_worker(server: Any, name: str, seconds: float, book: CostBook) -> Worker:
    settings = Settings(key_prefix=server.settings.key_prefix, lease_ttl=0.5, poll_interval=0.05)
    return Worker(server.redis(), settings, consumer=name, lane=Lane(0, seconds, book))


def test_an_update_past_the_express_cutoff_is_handed_over_not_failed_and_bit_identical(
        start_server: StartServer) -> None:
    """An express lane whose cutoff every update passes commits nothing, records no failed
    attempt and leaves the comparison to the general lanes, which compute the same bits as a
    lone worker."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    body = comparison_body("sgais", seed=3, **SGAIS)
    with server.client() as client:
        reference = create_and_ingest(client, body, 40, 20)
        drain(make_worker(server, "solo"), store, Keys(prefix, reference), 2)
        handed = create_and_ingest(client, body, 40, 20)
    book = CostBook()
    express = express_worker(server, "express", 1e-9, book)
    keys = Keys(prefix, handed)
    assert not express.run_once()
    assert int(store.hget(keys.meta, "sequence")) == 0
    assert store.hgetall(keys.attempts) == {}
    assert not express.lane.admits(handed)
    assert not express.run_once()  # no longer tried there
    general = make_worker(server, "general")
    general.lane = Lane(1, None, book)
    drain(general, store, keys, 2)
    assert states(store, keys) == states(store, Keys(prefix, reference))
    assert store.hgetall(keys.attempts) == {}
    cost = book.cost(handed)
    assert cost is not None and cost > 0  # measured again by the general lane


@pytest.fixture
def costly_updates(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Updates of models named "costly" compute for 3 CPU seconds (checking their deadline, as
    the estimators do); the event is set once one has started."""
    real_update = Runner.update
    running = threading.Event()

    def update(self: Runner, state: Any, rows: Rows, history: Any, sequence: int,
               deadline: Deadline | None = None) -> Any:
        if self.name == "costly":
            running.set()
            done = time.thread_time() + 3.0
            while time.thread_time() < done:
                check_deadline(deadline, Progress(0, None, 0))
        return real_update(self, state, rows, history, sequence, deadline)

    monkeypatch.setattr(modelcompare.service.engine.Runner, "update", update)
    return running


def one_model(name: str) -> dict[str, Any]:
    return {"name": name, "seed": 0, "estimator": {"method": "exact"}, "x_dim": 4,
            "models": [{"name": name, "family": "linear_regression", "config": {"dim": 3}}]}


@contextlib.contextmanager
def serving(process: WorkerProcess) -> Iterator[None]:
    """``process`` serving on its lanes while the block runs."""
    stop = threading.Event()
    thread = threading.Thread(target=process.run, args=(stop,))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def wait_applied(store: Any, keys: Keys, sequence: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while int(store.hget(keys.meta, "sequence")) < sequence:
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.slow
def test_a_cheap_comparison_is_served_while_a_costly_update_holds_a_lane(
        start_server: StartServer, costly_updates: threading.Event) -> None:
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    settings = Settings(key_prefix=prefix, lease_ttl=0.5, poll_interval=0.05, worker_lanes=2,
                        express_lane_seconds=0.5)
    with serving(WorkerProcess(server.redis(), settings, consumer="lanes")), \
            server.client() as client:
        costly = create_and_ingest(client, one_model("costly"), 10, 10)
        assert costly_updates.wait(30), "the costly update never started"
        cheap = create_and_ingest(client, one_model("cheap"), 30, 10)
        wait_applied(store, Keys(prefix, cheap), 3, 30, "the cheap comparison was not served")
        # served while the general lane still computes the costly update (3 CPU s)
        assert int(store.hget(Keys(prefix, costly).meta, "sequence")) == 0
        wait_applied(store, Keys(prefix, costly), 1, 60, "the costly comparison did not progress")
    assert store.hgetall(Keys(prefix, costly).attempts) == {}


@pytest.mark.slow
def test_lanes_of_one_process_do_not_help_each_other(start_server: StartServer) -> None:
    """A chunk's model tasks are helped by other processes only: sibling lanes share one
    interpreter lock, so helping each other costs CPU and gains nothing."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    metrics = Metrics()
    settings = Settings(key_prefix=prefix, lease_ttl=0.5, poll_interval=0.05, worker_lanes=3)
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body("sgais", seed=4, **SGAIS), 120, 20)
    with serving(WorkerProcess(server.redis(), settings, consumer="siblings", metrics=metrics)):
        wait_applied(store, Keys(prefix, cid), 6, 60, "the chunks were not applied")
    assert metrics.registry.get_sample_value("modelcompare_model_updates_helped_total") == 0
