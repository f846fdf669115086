"""The sticky reliability record of a model's log Z (service/reliability.py): one update whose
SGHMC moves diverged past the threshold, or whose particles had collapsed, marks it for good, in
the evidence body and the trace."""

from __future__ import annotations

from typing import Any

import pytest
from service_helpers import chunks, comparison_body, regression_data, wait_for_sequence
from service_server import StartServer

from modelcompare.service.progress import Reliability
from modelcompare.service.reliability import observe


class Observed:
    """A model's reliability record, folded one update at a time."""

    def __init__(self) -> None:
        self.record = Reliability()

    def __call__(self, n: int, fraction: float | None, threshold: float = 0.1,
                 spread: float | None = None) -> dict[str, Any]:
        self.record = observe(self.record, {"diverged_fraction": fraction, "spread": spread}, n,
                              threshold)
        return self.record.model_dump()


INITIAL = Reliability().model_dump()


def test_healthy_and_exact_updates_leave_the_model_reliable() -> None:
    updated = Observed()
    assert updated(100, None) == INITIAL  # exact moves: nothing to count
    record = updated(200, 0.02)
    assert record == {**INITIAL, "max_diverged_fraction": 0.02}
    assert updated(300, 0.1)["reliable"] is True  # at the threshold: not past it
    assert updated.record.reliable and Reliability.model_validate({}).reliable  # stored before
    assert observe(Reliability(), None, 100, 0.1) == Reliability()  # an update without Info


def test_one_diverged_update_marks_the_model_for_good() -> None:
    updated = Observed()
    updated(500, 0.0)
    record = updated(1000, 0.75)
    assert (record["reliable"], record["diverged_updates"], record["first_diverged_at"]) == (
        False, 1, 1000)
    assert "more than 10% of their SGHMC trajectories" in record["reason"]
    assert "by row 1000, at most 75%" in record["reason"]
    calm = updated(1500, 0.0)  # the damage is done: later calm updates clear nothing
    assert calm == record and not updated.record.reliable
    again = updated(2000, 0.5)
    assert (again["diverged_updates"], again["first_diverged_at"],
            again["max_diverged_fraction"]) == (2, 1000, 0.75)


def test_a_frozen_cloud_marks_the_model_for_good() -> None:
    updated = Observed()
    assert updated(1000, 0.0, spread=0.6)["reliable"] is True
    assert updated(1500, 0.0, spread=2e-4)["reliable"] is True  # above 1e-4
    record = updated(2000, 0.0, spread=6e-20)
    assert (record["reliable"], record["frozen_at"], record["diverged_updates"]) == (
        False, 2000, 0)
    assert record["reason"] == (
        "the particles had collapsed onto one point by row 2000 (their spread under 0.0001 of "
        "the posterior's variance), and log Z may be off by more than its standard error")
    assert updated(2500, 0.0, spread=1.0) == record  # sticky
    both = updated(3000, 0.5, spread=1.0)
    assert both["reason"].startswith("1 update(s) undid more than 10% of their SGHMC")
    assert both["reason"].endswith("by row 2000 (their spread under 0.0001 of the posterior's "
                                   "variance), and log Z may be off by more than its standard "
                                   "error")


def test_a_wide_cloud_marks_the_model_for_good() -> None:
    updated = Observed()
    assert updated(1000, 0.0, spread=1.3)["reliable"] is True
    assert updated(1500, 0.0, spread=3.9)["reliable"] is True  # below 4
    record = updated(2000, 0.0, spread=24.0)
    assert (record["reliable"], record["wide_at"], record["frozen_at"]) == (False, 2000, None)
    assert record["reason"] == (
        "the particles had spread far wider than the posterior by row 2000 (their spread over "
        "4 times the posterior's variance), and log Z may be off by more than its standard error")
    assert updated(2500, 0.0, spread=1.0) == record  # sticky
    assert updated(3000, 0.0, spread=30.0)["wide_at"] == 2000


@pytest.mark.slow
def test_a_comparison_whose_moves_diverge_is_reported_unreliable(
        start_server: StartServer, caplog: pytest.LogCaptureFixture) -> None:
    """Linear regressions with SGHMC from row 101: at the default learning rate every model stays
    reliable; at lr 10 (far too large for the posterior) the second chunk marks each of them,
    and the worker logs it and counts it (GET /metrics) once per model."""
    server = start_server("embedded")
    x, y = regression_data(300)
    with server.client() as client:
        found = {}
        for name, settings in {"calm": {}, "reckless": {"lr": 10.0}}.items():
            body = comparison_body("sgais", full_batch_rows=100, **settings)
            cid = client.post("/v1/comparisons", json=body).json()["id"]
            for chunk in chunks(x, y, 100):
                assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
            evidence = wait_for_sequence(client, cid, 3)
            trace = client.get(f"/v1/comparisons/{cid}/history").json()["models"]
            found[name] = evidence["models"], trace
        metrics = client.get("/metrics").text
    assert "modelcompare_models_marked_unreliable_total 3.0" in metrics
    for model in found["calm"][0]:
        assert model["reliability"]["reliable"] is True
        assert model["reliability"]["max_diverged_fraction"] < 0.1
        assert model["reliability"]["frozen_at"] is None
        assert model["reliability"]["wide_at"] is None
    for model in found["reckless"][0]:
        record = model["reliability"]
        assert (record["reliable"], record["first_diverged_at"]) == (False, 200)
        assert record["diverged_updates"] == 2 and record["max_diverged_fraction"] > 0.5
        assert record["reason"].startswith("2 update(s) undid more than 10%")
        assert model["log_evidence"] is not None  # log Z carries on, marked
        fractions = found["reckless"][1][model["name"]]["diverged_fraction"]
        assert fractions[0] is None and min(fractions[1:]) > 0.1  # chunk 1: exact moves
    warnings = [r.getMessage() for r in caplog.records if "unreliable" in r.getMessage()]
    assert sorted(w.split(": ")[1] for w in warnings) == [
        "model right unreliable", "model too_few unreliable", "model wrong_noise unreliable"]


@pytest.mark.slow
def test_the_spread_reaches_the_evidence_and_the_trace(start_server: StartServer) -> None:
    """The update whose rows cross 2,000 measures each model's cloud (``info.spread``): near 1
    where it follows the posterior, misspecified models included; the others read null."""
    server = start_server("embedded")
    x, y = regression_data(2100, seed=3)
    with server.client() as client:
        body = comparison_body("sgais", full_batch_rows=100)
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in (*chunks(x[:1900], y[:1900], 1900), *chunks(x[1900:], y[1900:], 200)):
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        evidence = wait_for_sequence(client, cid, 2)
        trace = client.get(f"/v1/comparisons/{cid}/history").json()["models"]
    for model in evidence["models"]:
        assert 0.5 < model["info"]["spread"] < 2, model["name"]
        assert model["reliability"]["reliable"] and model["reliability"]["frozen_at"] is None
        assert model["reliability"]["wide_at"] is None
        assert trace[model["name"]]["spread"] == [None, model["info"]["spread"]]
