"""Windowed evidence: log p(last W rows | earlier rows) from checkpoints of the running log Z,
against the closed-form value, and the windowed log Bayes factors between models."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from service_helpers import by_name, chunks, comparison_body, regression_data
from service_server import StartServer

from modelcompare.estimators import OnlineEvidence, exact_log_evidence
from modelcompare.models import LinearRegression
from modelcompare.service.window import MAX_CHECKPOINTS, advance, bayes_factors


def summary_of(tracker: OnlineEvidence) -> dict[str, Any]:
    return {
        "n_observations": tracker.n_observations,
        "log_evidence": tracker.log_evidence,
        "log_evidence_stderr": tracker.log_evidence_stderr,
    }


def stream(chunk: int, rows: int, window: int, method: str = "exact") -> tuple[dict, Any, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(
        rows, generator=g, dtype=torch.float64
    )
    kwargs = {} if method == "exact" else {"seed": 0}
    tracker = OnlineEvidence(LinearRegression(2), method=method, **kwargs)
    summary: dict[str, Any] = {}
    for start in range(0, rows, chunk):
        tracker.update(x[start : start + chunk], y[start : start + chunk])
        summary.update(summary_of(tracker))
        advance(summary, window)
    return summary, x, y


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [100, 7])
def test_the_window_is_the_exact_conditional_evidence_of_the_last_rows(chunk: int) -> None:
    rows, window = 2000, 500
    summary, x, y = stream(chunk, rows, window)
    spanned = summary["window"]["rows"]
    assert spanned >= window and len(summary["window_checkpoints"]) <= MAX_CHECKPOINTS
    model = LinearRegression(2)
    first = rows - spanned
    expected = exact_log_evidence(model, x, y) - exact_log_evidence(model, x[:first], y[:first])
    assert summary["window"]["log_evidence"] == pytest.approx(expected, rel=1e-9)
    assert summary["window"]["log_evidence_stderr"] == 0.0
    if chunk == 100:
        assert spanned == window  # chunks end on the window's start: no thinning needed


def test_before_w_rows_the_window_is_the_whole_stream() -> None:
    summary, _, _ = stream(100, 300, 500)
    assert summary["window"]["rows"] == 300
    assert summary["window"]["log_evidence"] == pytest.approx(summary["log_evidence"])


def test_sgais_window_variance_is_the_variance_added_inside_it() -> None:
    summary, _, _ = stream(150, 600, 300, method="sgais")
    points = summary["window_checkpoints"]
    assert summary["window"]["log_evidence_stderr"] == pytest.approx(
        math.sqrt(points[-1][2] - points[0][2])
    )
    assert 0.0 < summary["window"]["log_evidence_stderr"] < summary["log_evidence_stderr"]


def test_bayes_factors_against_the_best_window() -> None:
    def model(name: str, log_z: float, stderr: float) -> dict[str, Any]:
        window = {"rows": 500, "log_evidence": log_z, "log_evidence_stderr": stderr}
        return {"name": name, "window": window}

    models = [model("a", -700.0, 0.3), model("b", -690.0, 0.4), model("c", -650.0, 0.1)]
    bayes_factors(models, {"a", "b"})  # c is catching up: not comparable
    a, b, c = (m["window"] for m in models)
    assert a["best"] == b["best"] == "b"
    assert a["log_bayes_factor"] == pytest.approx(-10.0)
    assert a["log_bayes_factor_stderr"] == pytest.approx(0.5)
    assert b["log_bayes_factor"] == 0.0
    assert c["log_bayes_factor"] is None and c["best"] is None


def test_a_re_estimate_starts_the_window_again() -> None:
    """After log Z is estimated again over every row, a difference with a checkpoint of the
    estimate it replaced would mix two estimators: the window is null, then spans the rows
    since the re-estimate."""
    summary: dict[str, Any] = {}
    for n, log_z, restarted in [(100, -150.0, False), (200, -300.0, False),
                                (300, -430.0, True), (400, -580.0, False)]:
        summary.update(n_observations=n, log_evidence=log_z, log_evidence_stderr=0.5,
                       info={"restarted": restarted})
        advance(summary, 1000)
        if restarted:
            assert summary["window"] is None
            assert summary["window_checkpoints"] == [[300, -430.0, 0.25]]
    assert summary["window"] == {"rows": 100, "log_evidence": -150.0, "log_evidence_stderr": 0.0}


@pytest.mark.slow
def test_a_model_that_re_estimates_in_the_service_restarts_its_window(
        start_server: StartServer) -> None:
    """SG-AIS with steps too long for the posterior (``lr`` 1: most SGHMC trajectories diverge,
    which leaves the particles astray): the update that re-estimates log Z says so in
    ``info.restarted`` and its window is null; the next chunk's window spans it."""
    server = start_server("embedded")
    x, y = regression_data(600)
    body = comparison_body("sgais", full_batch_rows=100, restart_growth=2.0,
                           restart_min_rows=200, particles=32, lr=1.0)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        bodies = [client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=c).json()
                  for c in chunks(x, y, 100)]
    right = [by_name(evidence)["right"] for evidence in bodies]
    restarted = [i for i, m in enumerate(right) if m["info"]["restarted"]]
    assert restarted and restarted[0] >= 2  # not in the exact phase (its first 100 rows)
    first = restarted[0]
    assert right[first]["window"] is None
    assert right[first + 1]["window"]["rows"] == 100
