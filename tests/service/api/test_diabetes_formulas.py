"""The diabetes data (442 rows, named columns) compared by formulas through HTTP, chunks sent as
JSON columns: each log Z equals that of the same comparison built with index ``columns`` and
matrix chunks (same seed), and SG-AIS is within 1 nat of the exact evidence."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from service_server import Server
from sklearn.datasets import load_diabetes

pytestmark = pytest.mark.slow

FORMULAS = {
    "bmi": "target ~ bmi",
    "bmi_bp": "target ~ bmi + bp",
    "bmi_bp_s5": "target ~ bmi + bp + s5",
    "all_ten": "target ~ age + sex + bmi + bp + s1 + s2 + s3 + s4 + s5 + s6",
}
# Raw units (scaled=False): the target's spread around a fit is ~55; weights and the bias of
# up to a few hundred (the bias of the ten-input fit is about -330) stay within 2 prior_std.
CONFIG = {"noise_std": 55.0, "prior_std": 200.0}
ESTIMATORS = {"sgais": {"method": "sgais", "particles": 64}, "exact": {"method": "exact"}}
CHUNKS = 4


def by_formula(estimator: dict[str, Any]) -> dict[str, Any]:
    return {"name": "diabetes", "seed": 11, "estimator": estimator,
            "models": [{"name": name, "family": "linear_regression", "formula": formula,
                        "config": CONFIG} for name, formula in FORMULAS.items()]}


def by_index(created: dict[str, Any]) -> dict[str, Any]:
    """The same comparison by index ``columns`` over the formula comparison's stored design."""
    return {"name": "diabetes-twin", "seed": created["seed"], "x_dim": len(created["design"]),
            "estimator": created["estimator"],
            "models": [{"name": m["name"], "family": m["family"], "config": m["config"],
                        "columns": m["columns"]} for m in created["models"]]}


def log_evidence(client: httpx.Client, body: dict[str, Any],
                 chunks: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    created = client.post("/v1/comparisons", json=body)
    assert created.status_code == 201, created.text
    cid = created.json()["id"]
    for chunk in chunks:
        applied = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
        assert applied.status_code == 200, applied.text
    return created.json(), {m["name"]: m["log_evidence"] for m in applied.json()["models"]}


def test_diabetes_by_formula_equals_the_index_twin_and_the_exact_evidence(
    embedded_server: Server,
) -> None:
    frame: pd.DataFrame = load_diabetes(as_frame=True, scaled=False).frame
    assert frame.shape == (442, 11)
    parts = np.array_split(np.arange(len(frame)), CHUNKS)
    named_chunks = [{"columns": frame.iloc[rows].to_dict(orient="list")} for rows in parts]
    results: dict[str, dict[str, dict[str, float]]] = {}
    with embedded_server.client() as client:
        for method, estimator in ESTIMATORS.items():
            created, named = log_evidence(client, by_formula(estimator), named_chunks)
            x = frame[created["design"]].to_numpy(dtype=np.float64)
            y = frame["target"].to_numpy(dtype=np.float64)
            matrix_chunks = [{"x": x[rows].tolist(), "y": y[rows].tolist()} for rows in parts]
            _, twin = log_evidence(client, by_index(created), matrix_chunks)
            results[method] = {"formula": named, "twin": twin}
    print(f"\n{'model':<10} {'formula log Z':>16} {'twin log Z':>16} {'exact log Z':>16}"
          f" {'SG-AIS - exact':>15}")
    for name in FORMULAS:
        sgais, twin = results["sgais"]["formula"][name], results["sgais"]["twin"][name]
        exact = results["exact"]["formula"][name]
        print(f"{name:<10} {sgais:16.6f} {twin:16.6f} {exact:16.6f} {sgais - exact:15.4f}")
    for method in ESTIMATORS:
        for name in FORMULAS:
            formula, twin = results[method]["formula"][name], results[method]["twin"][name]
            assert formula == pytest.approx(twin, rel=1e-9, abs=0.0), (method, name)
            assert formula == twin, (method, name)  # the same stored design: bit for bit
    for name in FORMULAS:
        assert abs(results["sgais"]["formula"][name] - results["exact"]["formula"][name]) < 1.0
