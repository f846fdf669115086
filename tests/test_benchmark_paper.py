"""benchmarks/paper.py end to end on a tiny grid: the pipeline and its numbers against exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
def test_paper_tiny_grid_agrees_with_exact(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(BENCHMARKS / "paper.py"),
        "--models",
        "linear",
        "--methods",
        "sgais",
        "exact",
        "ais",
        "laplace_is",
        "--min-n",
        "100",
        "--max-n",
        "1000",
        "--results",
        str(tmp_path),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=280)
    payload = json.loads((tmp_path / "paper_linear.json").read_text())
    assert payload["grid"] == [100, 1000]
    assert (tmp_path / "paper_linear.png").stat().st_size > 0

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from paper import simulate
    finally:
        sys.path.remove(str(BENCHMARKS))
    from modelcompare.models import LinearRegression

    rows = simulate("linear", 1000, 0)
    results = payload["results"]
    for n in (100, 1000):
        exact = float(LinearRegression(5).batch_log_evidence(rows.x[:n], rows.y[:n]))
        by_n = {m: next(p for p in results[m]["points"] if p["n"] == n) for m in results}
        assert abs(by_n["exact"]["log_z"] - exact) < 1e-6 * abs(exact)
        for method in ("sgais", "ais", "laplace_is"):
            point = by_n[method]
            assert point["seconds"] > 0
            assert abs(point["log_z"] - exact) <= 3.0 * point["stderr"] + 0.05, (method, n)
        assert by_n["laplace_is"]["pareto_k"] < 0.7 and by_n["laplace_is"]["ess"] > 1000
    checks = payload["verdicts"]["references_vs_exact"]
    assert {(c["method"], c["n"]) for c in checks} == {
        (method, n) for method in ("ais", "laplace_is") for n in (100, 1000)
    }

    report = subprocess.run(
        [sys.executable, str(BENCHMARKS / "paper_report.py"), "--results", str(tmp_path)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout
    lines = report.splitlines()
    assert lines[0] == "**linear**"
    assert lines[2] == "| N | reference: log Z / N | exact | sgais | ais | laplace_is |"
    for n in (100, 1000):
        row = next(line for line in lines if line.startswith(f"| {n:,} |"))
        reference = next(p for p in results["exact"]["points"] if p["n"] == n)["log_z"]
        ais = next(p for p in results["ais"]["points"] if p["n"] == n)
        assert f"{reference / n:.5f} (exact)" in row
        assert f"{ais['log_z'] - reference:+.2f} ± {ais['stderr']:.2f}" in row
