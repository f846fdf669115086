"""Shared helpers of the service tests: data with a known answer, request bodies, polling."""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from modelcompare.models import LinearRegression
from modelcompare.service.cli import main

TRUE_WEIGHTS = np.array([1.0, -0.5, 0.25])


def regression_data(rows: int, seed: int = 0, columns: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """y = x[:, :3] · w + 0.3 + N(0, 1): the first three columns matter, the rest is noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, columns))
    y = x[:, :3] @ TRUE_WEIGHTS + 0.3 + rng.normal(size=rows)
    return x, y


def comparison_body(method: str = "exact", seed: int = 0, **settings: Any) -> dict[str, Any]:
    """Three linear regressions on one 4-column stream: right inputs, too few, wrong noise."""
    return {
        "name": "regression",
        "seed": seed,
        "models": [
            {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
            {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
            {"name": "wrong_noise", "family": "linear_regression",
             "config": {"dim": 3, "noise_std": 3.0}},
        ],
        "estimator": {"method": method, **settings},
        "x_dim": 4,
    }


def exact_log_evidence(config: dict[str, Any], x: np.ndarray, y: np.ndarray,
                       columns: list[int]) -> float:
    model = LinearRegression(**config)
    return float(model.batch_log_evidence(torch.tensor(x[:, columns]), torch.tensor(y)))


def chunks(x: np.ndarray, y: np.ndarray, size: int) -> list[dict[str, Any]]:
    return [{"x": x[i : i + size].tolist(), "y": y[i : i + size].tolist()}
            for i in range(0, len(y), size)]


def wait_for_sequence(client: httpx.Client, cid: str, sequence: int,
                      timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        if evidence["sequence"] >= sequence and not any(
            m["catching_up"] for m in evidence["models"]
        ):
            return evidence
        if time.monotonic() > deadline:
            raise TimeoutError(f"sequence {evidence['sequence']} < {sequence}")
        time.sleep(0.02)


def by_name(evidence: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in evidence["models"]}


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``modelcompare argv`` in this process: exit status, stdout, stderr."""
    try:
        main(list(argv))
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err
