"""Poison chunks: bounded retries, then a dead letter; halt (default) or skip; resume; degraded
status with the reason; the last good state is served meanwhile.

Ingest rejects the inputs that would break an estimator, so failures are injected into the
worker (which runs in this process): chunks carrying a marker value raise EstimatorError, raise
an unexpected RuntimeError, or leave a non-finite log evidence.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from service_helpers import assert_error, by_name, exact_log_evidence, wait_for_sequence
from service_server import Server, StartServer, drain, make_worker

import modelcompare.service.engine
from modelcompare.estimators import BudgetExceeded, EstimatorError, Progress, Rows
from modelcompare.service.engine import Runner
from modelcompare.service.store.keys import Keys

GOOD = {"x": [[0.1], [0.2]], "y": [0.3, 0.1]}
LATER = {"x": [[-0.4], [1.5]], "y": [0.2, 1.1]}
NON_FINITE, ESTIMATOR_ERROR, BUG, BUDGET = 555.0, 666.0, 777.0, 888.0  # markers in y
LINE = {"dim": 1, "noise_std": 1.0, "prior_std": 1.0}


def poison(marker: float) -> dict[str, Any]:
    return {"x": [[0.5]], "y": [marker]}


@pytest.fixture
def injected(monkeypatch: pytest.MonkeyPatch) -> None:
    real_update = Runner.update

    def update(self: Runner, state: Any, rows: Rows, *args: Any) -> Any:
        assert rows.y is not None
        if ESTIMATOR_ERROR in rows.y:
            raise EstimatorError("injected: this chunk cannot be absorbed")
        if BUG in rows.y:
            raise RuntimeError("injected: a bug")
        new_state, info = real_update(self, state, rows, *args)
        if NON_FINITE in rows.y:  # the exact estimator's state holds log Z itself
            new_state = new_state._replace(log_evidence=torch.tensor(math.nan))
        return new_state, info

    monkeypatch.setattr(modelcompare.service.engine.Runner, "update", update)


def create(client: httpx.Client, method: str = "exact") -> str:
    body = {"name": "poison", "seed": 0, "estimator": {"method": method},
            "models": [{"name": "line", "family": "linear_regression", "config": {"dim": 1}}]}
    return str(client.post("/v1/comparisons", json=body).json()["id"])


def post(client: httpx.Client, cid: str, chunk: dict[str, Any]) -> httpx.Response:
    return client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)


def exact_line(*chunks: dict[str, Any]) -> float:
    x = [row for c in chunks for row in c["x"]]
    y = [v for c in chunks for v in c["y"]]
    return exact_log_evidence(LINE, np.array(x), np.array(y), [0])


@pytest.mark.slow
@pytest.mark.usefixtures("injected")
def test_halt_keeps_the_last_good_state_until_resumed(start_server: StartServer) -> None:
    server = start_server("embedded", poison_max_attempts=2)
    with server.client() as client:
        cid = create(client)
        assert post(client, cid, GOOD).status_code == 200
        good = client.get(f"/v1/comparisons/{cid}/evidence").json()
        halted = post(client, cid, poison(NON_FINITE))
        assert halted.status_code == 202, halted.text
        assert halted.json()["processed"] is False and halted.json()["status"] == "degraded"
        queued = client.post(f"/v1/comparisons/{cid}/chunks", json=LATER)
        assert queued.json()["sequence"] == 3

        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        assert evidence["status"] == "degraded" and evidence["halted_at"] == 2
        assert "chunk 2" in evidence["status_reason"] and "resume" in evidence["status_reason"]
        assert evidence["sequence"] == 1 and evidence["n_observations"] == 2  # later chunk waits
        assert by_name(evidence)["line"]["log_evidence"] == by_name(good)["line"]["log_evidence"]
        described = client.get(f"/v1/comparisons/{cid}").json()
        assert described["status"] == "degraded" and described["ingested"] == 3
        letters = client.get(f"/v1/comparisons/{cid}/dead-letters").json()
        assert letters["halted_at"] == 2 and letters["policy"] == "halt"
        (letter,) = letters["dead_letters"]
        assert (letter["sequence"], letter["rows"], letter["attempts"], letter["action"]) == (
            2, 1, 2, "halted")
        assert "log evidence became nan" in letter["error"]

        retried = client.post(f"/v1/comparisons/{cid}/resume", json={"action": "retry"})
        assert retried.status_code == 200 and retried.json()["status"] == "ok"
        again = wait_for_halt(client, cid, dead_letters=2)
        assert again["halted_at"] == 2  # still poison: halted again after 2 attempts

        skipped = client.post(f"/v1/comparisons/{cid}/resume", json={"action": "skip"})
        assert skipped.status_code == 200
        final = wait_for_sequence(client, cid, 3)
        assert final["n_observations"] == 4 and final["halted_at"] is None
        assert final["status"] == "degraded" and final["skipped_chunks"] == 1
        assert by_name(final)["line"]["log_evidence"] == pytest.approx(
            exact_line(GOOD, LATER), rel=1e-12)
        trace = client.get(f"/v1/comparisons/{cid}/history").json()["points"]
        assert [p["sequence"] for p in trace] == [1, 2, 3]
        assert_error(client.post(f"/v1/comparisons/{cid}/resume", json={"action": "retry"}),
                     409, "not_halted")
        assert_error(client.post(f"/v1/comparisons/{cid}/resume", json={"action": "drop"}), 422)
        assert_error(client.post("/v1/comparisons/nope/resume", json={"action": "skip"}), 404)
        assert_error(client.get("/v1/comparisons/nope/dead-letters"), 404)
        metrics = client.get("/metrics").text
        assert "modelcompare_chunks_dead_lettered_total 2.0" in metrics


def wait_for_halt(client: httpx.Client, cid: str, dead_letters: int) -> dict[str, Any]:
    for _ in range(600):
        body = client.get(f"/v1/comparisons/{cid}/dead-letters").json()
        if len(body["dead_letters"]) >= dead_letters and body["halted_at"]:
            return client.get(f"/v1/comparisons/{cid}/evidence").json()
        time.sleep(0.02)
    raise TimeoutError("the comparison did not halt again")


@pytest.mark.slow
@pytest.mark.usefixtures("injected")
def test_skip_policy_dead_letters_and_goes_on(start_server: StartServer) -> None:
    server = start_server("embedded", poison_policy="skip", poison_max_attempts=2)
    with server.client() as client:
        cid = create(client)
        post(client, cid, GOOD)
        skipped = post(client, cid, poison(ESTIMATOR_ERROR)).json()
        assert skipped["sequence"] == 2 and skipped["n_observations"] == 2
        assert skipped["status"] == "degraded" and skipped["skipped_chunks"] == 1
        assert "EstimatorError" in skipped["last_error"]["message"]
        assert post(client, cid, poison(BUG)).json()["skipped_chunks"] == 2
        after = post(client, cid, LATER).json()
        assert after["sequence"] == 4 and by_name(after)["line"]["n_observations"] == 4
        assert by_name(after)["line"]["log_evidence"] == pytest.approx(
            exact_line(GOOD, LATER), rel=1e-12)
        assert after["status"] == "degraded"  # skipped chunks are missing for good
        assert "2 chunk(s)" in after["status_reason"]
        letters = client.get(f"/v1/comparisons/{cid}/dead-letters").json()["dead_letters"]
        assert [(d["sequence"], d["attempts"], d["action"]) for d in letters] == [
            (2, 2, "skipped"), (3, 2, "skipped")]
        assert "RuntimeError: injected: a bug" in letters[1]["error"]


@pytest.mark.parametrize(
    ("failure", "why"),
    [(RuntimeError("transient"), "RuntimeError: transient"),
     (BudgetExceeded(Progress(rows=0, temperature=None, steps=0)), "BudgetExceeded: ")],
    ids=["raised", "over budget"],
)
def test_a_transient_failure_is_retried_not_dead_lettered(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    failure: Exception, why: str,
) -> None:
    """Logged at INFO: a run whose retry succeeds shows no warning."""
    server = start_server("embedded", embedded_worker=False)
    store = server.redis()
    failures = iter([failure])
    real_update = Runner.update

    def flaky(self: Runner, *args: Any) -> Any:
        once = next(failures, None)
        if once is not None:
            raise once
        return real_update(self, *args)

    monkeypatch.setattr(modelcompare.service.engine.Runner, "update", flaky)
    with server.client() as client:
        cid = create(client)
        client.post(f"/v1/comparisons/{cid}/chunks", json=GOOD)
        keys = Keys(server.settings.key_prefix, cid)
        worker = make_worker(server, "flaky", poison_max_attempts=2)
        with caplog.at_level(logging.INFO, logger="modelcompare"):
            assert worker.run_once() is False  # first attempt fails: nothing committed
            assert store.hget(keys.attempts, "1") == b"1"
            drain(worker, store, keys, 1)
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
    retried = f"comparison {cid}: chunk 1 failed (attempt 1 of 2): model 'line': {why}"
    (retry,) = [r for r in caplog.records if r.getMessage().startswith(retried)]
    assert retry.levelname == "INFO"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert evidence["status"] == "ok" and evidence["last_error"] is None
    assert by_name(evidence)["line"]["log_evidence"] == pytest.approx(exact_line(GOOD), rel=1e-12)
    assert store.hlen(keys.attempts) == 0 and store.xlen(keys.dead_letters) == 0


def test_a_chunk_over_the_update_budget_is_dead_lettered_with_the_reason(
    start_server: StartServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """The retried attempt is logged at INFO, the dead letter at ERROR."""
    server = start_server("embedded", update_budget=1e-6, poison_max_attempts=2)
    caplog.set_level(logging.INFO, logger="modelcompare")
    with server.client() as client:
        cid = create(client, "sgais")
        store, keys = server.redis(), Keys(server.settings.key_prefix, cid)
        initial = store.hgetall(keys.states)
        halted = post(client, cid, GOOD)
        assert halted.status_code == 202, halted.text
        assert halted.json()["processed"] is False and halted.json()["status"] == "degraded"
        reason = halted.json()["status_reason"]
        assert "BudgetExceeded" in reason and "deadline" in reason, reason
        letters = client.get(f"/v1/comparisons/{cid}/dead-letters").json()
        (letter,) = letters["dead_letters"]
        assert letter["sequence"] == 1 and letter["attempts"] == 2
        assert "BudgetExceeded" in letter["error"]
        assert store.hgetall(keys.states) == initial  # the last good state: the prior's
    chunk = f"comparison {cid}: chunk 1 "
    assert [(r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records
            if r.getMessage().startswith(chunk)] == [
        ("INFO", f"{chunk}failed"), ("ERROR", f"{chunk}dead-lettered after 2 attempts")]


def create_pair(client: httpx.Client) -> str:
    """Two identical exact models; only "bad" is made to fail (``failing_model``)."""
    body = {"name": "pair", "seed": 0, "estimator": {"method": "exact"},
            "models": [{"name": name, "family": "linear_regression", "config": {"dim": 1}}
                       for name in ("line", "bad")]}
    return str(client.post("/v1/comparisons", json=body).json()["id"])


@pytest.fixture
def failing_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model "bad" raises on chunks carrying ESTIMATOR_ERROR, and runs past its budget on
    chunks carrying BUDGET; "line" absorbs every chunk."""
    real_update = Runner.update

    def update(self: Runner, state: Any, rows: Rows, *args: Any) -> Any:
        assert rows.y is not None
        if self.name == "bad" and ESTIMATOR_ERROR in rows.y:
            raise EstimatorError("injected: this model cannot absorb the chunk")
        if self.name == "bad" and BUDGET in rows.y:
            raise BudgetExceeded(Progress(rows=0, temperature=None, steps=0))
        return real_update(self, state, rows, *args)

    monkeypatch.setattr(modelcompare.service.engine.Runner, "update", update)

@pytest.mark.slow
@pytest.mark.usefixtures("failing_model")
def test_a_model_that_fails_leaves_and_the_others_go_on(start_server: StartServer) -> None:
    server = start_server("embedded", poison_max_attempts=2)
    with server.client() as client:
        cid = create_pair(client)
        first = post(client, cid, GOOD).json()
        bad = poison(ESTIMATOR_ERROR)
        applied = post(client, cid, bad)
        assert applied.status_code == 200, applied.text
        evidence = applied.json()
        assert evidence["sequence"] == 2 and evidence["n_observations"] == 3
        assert evidence["status"] == "ok" and evidence["halted_at"] is None
        models = by_name(evidence)
        assert models["line"]["failed"] is None and models["line"]["n_observations"] == 3
        assert models["line"]["log_evidence"] == pytest.approx(exact_line(GOOD, bad), rel=1e-12)
        reason = models["bad"]["failed"]
        assert reason.startswith("chunk 2: EstimatorError: injected"), reason
        # its evidence stays where the last chunk it absorbed left it
        assert models["bad"]["n_observations"] == 2
        assert models["bad"]["log_evidence"] == by_name(first)["bad"]["log_evidence"]
        assert models["line"]["posterior_probability"] == 1.0
        assert models["bad"]["posterior_probability"] is None
        predicted = client.post(f"/v1/comparisons/{cid}/predict", json={"x": [[0.3]]}).json()
        parts = {part["name"]: part for part in predicted["models"]}
        assert predicted["mixture"]["mean"] == parts["line"]["mean"] != parts["bad"]["mean"]

        later = post(client, cid, LATER).json()
        assert later["sequence"] == 3 and by_name(later)["line"]["n_observations"] == 5
        assert by_name(later)["bad"]["n_observations"] == 2
        assert client.get(f"/v1/comparisons/{cid}/dead-letters").json()["dead_letters"] == []
        attempts = server.redis().hlen(Keys(server.settings.key_prefix, cid).attempts)
        assert attempts == 0
        metrics = client.get("/metrics").text
        assert "modelcompare_models_failed_total 1.0" in metrics
        assert "modelcompare_chunks_dead_lettered_total 0.0" in metrics

        # removed, the failed model frees its place: its name, its count towards MAX_MODELS
        removed = client.delete(f"/v1/comparisons/{cid}/models/bad")
        assert removed.status_code == 200
        assert [m["name"] for m in removed.json()["evidence"]["models"]] == ["line"]
        after = post(client, cid, GOOD).json()
        assert after["sequence"] == 4 and [m["name"] for m in after["models"]] == ["line"]
        assert after["models"][0]["log_evidence"] == pytest.approx(
            exact_line(GOOD, bad, LATER, GOOD), rel=1e-12)


def assert_halts_every_model(server: Server, marker: float, error: str) -> None:
    """Model "bad" fails on the second chunk (``failing_model``): the comparison halts there
    with ``error`` in the reason, and no model is marked failed."""
    with server.client() as client:
        cid = create_pair(client)
        post(client, cid, GOOD)
        halted = post(client, cid, poison(marker))
        assert halted.status_code == 202, halted.text
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        assert evidence["halted_at"] == 2 and error in evidence["status_reason"]
        assert all(m["failed"] is None for m in evidence["models"])


@pytest.mark.usefixtures("failing_model")
def test_a_model_failure_is_the_chunks_with_poison_scope_chunk(
    start_server: StartServer,
) -> None:
    server = start_server("embedded", poison_max_attempts=2, poison_scope="chunk")
    assert_halts_every_model(server, ESTIMATOR_ERROR, "EstimatorError")


@pytest.mark.usefixtures("failing_model")
def test_a_budget_overrun_is_the_chunks_not_one_models(start_server: StartServer) -> None:
    """The models one worker computes share the budget: the one it ran out in is not
    necessarily the slow one, so no model is failed for it."""
    server = start_server("embedded", poison_max_attempts=2)
    assert_halts_every_model(server, BUDGET, "BudgetExceeded")
