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
from modelcompare.service.progress import ModelProgress, Window
from modelcompare.service.window import MAX_CHECKPOINTS, advance, bayes_factors


def model(n: int, log_z: float, stderr: float, **info: Any) -> ModelProgress:
    return ModelProgress(sequence=0, n_observations=n, log_evidence=log_z,
                         log_evidence_stderr=stderr, ess=None, info=info)


def read(summary: ModelProgress, n: int, log_z: float, stderr: float,
         **info: Any) -> ModelProgress:
    return summary.model_copy(update={"n_observations": n, "log_evidence": log_z,
                                      "log_evidence_stderr": stderr, "info": info})


def stream(chunk: int, rows: int, window: int,
           method: str = "exact") -> tuple[ModelProgress, Any, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(
        rows, generator=g, dtype=torch.float64
    )
    kwargs = {} if method == "exact" else {"seed": 0}
    tracker = OnlineEvidence(LinearRegression(2), method=method, **kwargs)
    summary = model(0, 0.0, 0.0)
    for start in range(0, rows, chunk):
        tracker.update(x[start : start + chunk], y[start : start + chunk])
        summary = advance(read(summary, tracker.n_observations, tracker.log_evidence,
                               tracker.log_evidence_stderr), window)
    return summary, x, y


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [100, 7])
def test_the_window_is_the_exact_conditional_evidence_of_the_last_rows(chunk: int) -> None:
    rows, window = 2000, 500
    summary, x, y = stream(chunk, rows, window)
    assert summary.window is not None
    spanned = summary.window.rows
    assert spanned >= window and len(summary.checkpoints) <= MAX_CHECKPOINTS
    model = LinearRegression(2)
    first = rows - spanned
    expected = exact_log_evidence(model, x, y) - exact_log_evidence(model, x[:first], y[:first])
    assert summary.window.log_evidence == pytest.approx(expected, rel=1e-9)
    assert summary.window.log_evidence_stderr == 0.0
    if chunk == 100:
        assert spanned == window  # chunks end on the window's start: no thinning needed


def test_before_w_rows_the_window_is_the_whole_stream() -> None:
    summary, _, _ = stream(100, 300, 500)
    assert summary.window is not None and summary.window.rows == 300
    assert summary.window.log_evidence == pytest.approx(summary.log_evidence)


def test_sgais_window_variance_is_the_variance_added_inside_it() -> None:
    summary, _, _ = stream(150, 600, 300, method="sgais")
    points = summary.checkpoints
    assert summary.window is not None and summary.log_evidence_stderr is not None
    assert summary.window.log_evidence_stderr == pytest.approx(
        math.sqrt(points[-1][2] - points[0][2])
    )
    assert 0.0 < summary.window.log_evidence_stderr < summary.log_evidence_stderr


def test_bayes_factors_against_the_best_window() -> None:
    windows: dict[str, Window | None] = {
        name: Window(rows=500, log_evidence=log_z, log_evidence_stderr=stderr)
        for name, log_z, stderr in [("a", -700.0, 0.3), ("b", -690.0, 0.4), ("c", -650.0, 0.1)]
    }
    found = bayes_factors({**windows, "d": None}, {"a", "b"})  # c catching up: not comparable
    a, b, c = (found[name] for name in "abc")
    assert a is not None and b is not None and c is not None and found["d"] is None
    assert a["best"] == b["best"] == "b"
    assert a["log_bayes_factor"] == pytest.approx(-10.0)
    assert a["log_bayes_factor_stderr"] == pytest.approx(0.5)
    assert b["log_bayes_factor"] == 0.0
    assert c["log_bayes_factor"] is None and c["best"] is None


def test_a_re_estimate_starts_the_window_again() -> None:
    """After log Z is estimated again over every row, a difference with a checkpoint of the
    estimate it replaced would mix two estimators: the window is null, then spans the rows
    since the re-estimate."""
    summary = model(0, 0.0, 0.0)
    for n, log_z, reestimated in [(100, -150.0, False), (200, -300.0, False),
                                  (300, -430.0, True), (400, -580.0, False)]:
        summary = advance(read(summary, n, log_z, 0.5, reestimated=reestimated), 1000)
        if reestimated:
            assert summary.window is None
            assert summary.checkpoints == ((300, -430.0, 0.25),)
    assert summary.window == Window(rows=100, log_evidence=-150.0, log_evidence_stderr=0.0)
    assert summary.checkpoints == ((300, -430.0, 0.25), (400, -580.0, 0.25))


def test_an_unknown_log_z_leaves_the_window_as_it_was() -> None:
    summary = advance(model(100, -150.0, 0.5), 1000)
    unknown = summary.model_copy(update={"n_observations": 200, "log_evidence": None})
    assert advance(unknown, 1000) == unknown and unknown.window is not None


@pytest.mark.slow
def test_a_model_that_re_estimates_in_the_service_restarts_its_window(
        start_server: StartServer) -> None:
    """SG-AIS with steps too long for the posterior (``lr`` 1: most SGHMC trajectories diverge,
    which leaves the particles astray): the update that re-estimates log Z says so in
    ``info.reestimated`` and its window is null; the next chunk's window spans it."""
    server = start_server("embedded")
    x, y = regression_data(600)
    body = comparison_body("sgais", full_batch_rows=100, reestimate_growth=2.0,
                           reestimate_min_rows=200, particles=32, lr=1.0)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        bodies = [client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=c).json()
                  for c in chunks(x, y, 100)]
    right = [by_name(evidence)["right"] for evidence in bodies]
    reestimated = [i for i, m in enumerate(right) if m["info"]["reestimated"]]
    assert reestimated and reestimated[0] >= 2  # not in the exact phase (its first 100 rows)
    first = reestimated[0]
    assert right[first]["window"] is None
    assert right[first + 1]["window"]["rows"] == 100
