"""benchmarks/calibration.py ``--pool``: earlier outputs' runs joined into one cell's verdict."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BenchmarkModule = Callable[[str], ModuleType]  # the ``benchmark_module`` fixture (conftest)


def output(path: Path, runs: list[tuple[str, str, int, int, int, float]]) -> str:
    records = [
        {"family": family, "stream": stream, "rows": rows, "dataset": dataset, "seed": seed,
         "reference": -100.0, "error": error, "stderr": 1.0, "reference_stderr": 0.0}
        for family, stream, rows, dataset, seed, error in runs
    ]
    path.write_text(json.dumps({"runs": records}))
    return str(path)


def test_pooling_joins_the_chosen_cell_across_outputs_and_refuses_a_run_twice(
    benchmark_module: BenchmarkModule, tmp_path: Path,
) -> None:
    calibration = benchmark_module("calibration")
    first = output(tmp_path / "seed0.json", [
        ("logistic", "iid", 10_000, 0, 0, 1.0),
        ("logistic", "iid", 10_000, 1, 1, -3.0),
        ("logistic", "ordered", 10_000, 0, 0, 9.0),  # another stream
        ("linear", "iid", 10_000, 0, 0, 9.0),  # another family
        ("logistic", "iid", 2_000, 0, 0, 9.0),  # another length
    ])
    second = output(tmp_path / "seed100.json", [("logistic", "iid", 10_000, 0, 100, 1.0)])

    runs = calibration.pooled_runs([first, second], 10_000, ["logistic"], ["iid"], set())

    assert sorted((r["dataset"], r["seed"]) for r in runs) == [(0, 0), (0, 100), (1, 1)]
    cell = calibration.calibration(runs, "error", "stderr")
    assert cell["runs"] == 3
    assert cell["coverage"] == pytest.approx(2 / 3)
    assert cell["rms_z"] == pytest.approx((11 / 3) ** 0.5)  # z = 1, −3, 1
    with pytest.raises(SystemExit, match=r"\('logistic', 'iid', 0, 0\) is already pooled"):
        calibration.pooled_runs([first, first], 10_000, ["logistic"], ["iid"], set())
    # a run this invocation is about to make counts as found too
    with pytest.raises(SystemExit, match=r"\('logistic', 'iid', 0, 100\) is already pooled"):
        calibration.pooled_runs([second], 10_000, ["logistic"], ["iid"],
                                {("logistic", "iid", 0, 100)})


def test_averaged_systems_average_z_over_a_data_sets_seeds_with_the_delta_method_stderr(
    benchmark_module: BenchmarkModule,
) -> None:
    calibration = benchmark_module("calibration")

    def run(dataset: int, seed: int, log_z: float) -> dict[str, Any]:
        return {"family": "linear", "stream": "iid", "dataset": dataset, "seed": seed,
                "reference": -100.0, "reference_stderr": 0.0, "log_z": log_z,
                "error": log_z + 100.0, "stderr": 1.0}

    # raw log Ẑ (reported − σ̂²/2): −100 and −100 + log 3, so Ẑ̄ = 2 e⁻¹⁰⁰ with weights 1/4, 3/4
    runs = [run(0, 0, -99.5), run(0, 100, -99.5 + math.log(3.0)), run(1, 1, -99.0)]

    (joined,) = calibration.averaged_systems(runs)  # data set 1 has one system: left out

    variance = (1 / 4) ** 2 + (3 / 4) ** 2
    assert joined["dataset"] == 0 and joined["systems"] == 2
    assert joined["stderr"] == pytest.approx(math.sqrt(variance))
    assert joined["error"] == pytest.approx(math.log(2.0) + variance / 2)

