"""benchmarks/_common.py: a ``--quick`` benchmark run never overwrites the committed results (it
writes to results/quick/, even when told to write into the committed folder), a named run goes
to results/runs/, the committed folder holds one result per script under the script's own name,
and ``replicate_spread`` splits errors into engine-seed noise and an error that repeats."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
BenchmarkModule = Callable[[str], ModuleType]  # the ``benchmark_module`` fixture (conftest)


@pytest.mark.slow
def test_a_quick_run_leaves_the_committed_results_alone(tmp_path: Path) -> None:
    copy = tmp_path / "benchmarks"
    shutil.copytree(BENCHMARKS, copy, ignore=shutil.ignore_patterns("quick", "__pycache__"))
    committed = {p.name: p.read_bytes() for p in (copy / "results").iterdir() if p.is_file()}
    assert "partial_posteriors.json" in committed
    script = str(copy / "partial_posteriors.py")
    for extra in ([], ["--output", str(copy / "results" / "partial_posteriors.json")]):
        done = subprocess.run([sys.executable, script, "--quick", *extra], capture_output=True,
                              text=True, timeout=240, check=True)
        assert f"wrote {copy / 'results' / 'quick' / 'partial_posteriors.json'}" in done.stdout
    after = {p.name: p.read_bytes() for p in (copy / "results").iterdir() if p.is_file()}
    assert after == committed
    assert (copy / "results" / "quick" / "partial_posteriors.json").stat().st_size > 0


def test_every_quick_script_writes_through_the_common_paths() -> None:
    """Scripts with ``--quick`` name no results path of their own and write no result file
    directly: ``write_json`` / ``result_path`` decide where (the check above covers their
    behaviour). Scratch files (fuzz.py's schemathesis config in a temporary folder) are not
    results."""
    for script in BENCHMARKS.glob("*.py"):
        code = script.read_text()
        if "--quick" not in code or script.name == "_common.py":
            continue
        assert '"benchmarks/results' not in code and '/ "results"' not in code, script.name
        assert "json.dump(" not in code and ".write_text(json" not in code, script.name


def test_a_named_run_goes_to_runs_and_the_scripts_own_name_to_the_committed_folder(
    benchmark_module: BenchmarkModule, tmp_path: Path
) -> None:
    common = benchmark_module("_common")
    committed, runs = common.COMMITTED, common.RUNS
    assert common.result_path(None, "accuracy.json") == committed / "accuracy.json"
    assert common.result_path("accuracy.json", "accuracy.json") == committed / "accuracy.json"
    assert common.result_path("probe.json", "accuracy.json") == runs / "probe.json"
    assert common.result_path(committed / "probe.json", "accuracy.json") == runs / "probe.json"
    assert common.result_path(tmp_path / "probe.json", "accuracy.json") == tmp_path / "probe.json"
    # an earlier named run is found where it was written, a committed result where it lies
    assert common.earlier_result("absent.json") == runs / "absent.json"
    assert common.earlier_result("calibration.json") == committed / "calibration.json"
    assert common.earlier_result(tmp_path / "a.json") == tmp_path / "a.json"


def test_the_committed_results_are_one_per_script_under_its_own_name() -> None:
    """No run names, replicates or probes among the committed results: each file is named after
    the script that writes it (paper.py and sgais_bias.py write one per model, calibration.py
    keeps its references cache beside its result)."""
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    per_model = {"paper": ("cells", "linear", "logistic", "mixture"),
                 "sgais_bias": ("linear", "logistic", "mixture"),
                 "calibration": ("references",)}
    allowed = scripts | {f"{s}_{m}" for s, models in per_model.items() for m in models}
    files = [p for p in (BENCHMARKS / "results").iterdir() if p.is_file()]
    assert len(files) <= 60
    for path in files:
        assert path.suffix in {".json", ".png"}, path.name
        assert path.stem in allowed, path.name


def test_results_name_the_commit_they_came_from() -> None:
    """Every result's ``environment`` names the commit and whether its code was uncommitted (a
    stop quoted figures from a tree that matched no commit, which no one could reproduce)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from _common import environment
    finally:
        sys.path.remove(str(BENCHMARKS))
    head = subprocess.run(["git", "-C", str(BENCHMARKS), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    recorded = environment(1)
    if head.returncode != 0:  # not a git checkout (an unpacked archive): nothing to name
        assert recorded["commit"] is None
        return
    assert recorded["commit"] == head.stdout.strip()
    dirty = subprocess.run(["git", "-C", str(BENCHMARKS), "status", "--porcelain", "--",
                            "../estimators", "../models", "../service", "."],
                           capture_output=True, text=True, check=True).stdout
    assert recorded["uncommitted_code"] == any(
        line.endswith(".py") for line in dirty.splitlines())


def test_replicate_spread_splits_the_errors_into_seed_noise_and_a_data_sets_own_error(
    benchmark_module: BenchmarkModule,
) -> None:
    common = benchmark_module("_common")

    def run(dataset: int, seed: int, error: float) -> dict[str, Any]:
        return {"family": "logistic", "stream": "ordered", "dataset": dataset, "seed": seed,
                "reference": -100.0, "reference_stderr": 0.0, "error": error, "stderr": 1.0}

    runs = [run(0, 0, 1.0), run(0, 100, 3.0),  # mean 2, squares 2
            run(1, 1, -1.0), run(1, 101, -1.0), run(1, 201, 2.0),  # mean 0, squares 6
            run(2, 2, 5.0), run(3, 3, math.nan)]  # one run each: left out

    spread = common.replicate_spread(runs)

    within = (2.0 + 6.0) / (1 + 2)
    assert (spread["data_sets"], spread["runs"]) == (2, 5)
    assert spread["within"] == pytest.approx(within)
    assert spread["ratio"] == pytest.approx(within)  # every stderr² is 1
    low, high = spread["ratio_if_calibrated"]
    assert low < 1.0 < high
    assert spread["bias_mean"] == pytest.approx(1.0)
    # the variance of the means 2 and 0, less their own noise within / 2 and within / 3
    assert spread["bias_variance"] == pytest.approx(2.0 - (within / 2 + within / 3) / 2)
    assert common.replicate_spread([run(0, 0, 1.0), run(1, 1, 2.0)]) is None
    # without a family, stream or reference stderr (accuracy.py's exact references)
    bare = [{"dataset": r["dataset"], "error": r["error"], "stderr": r["stderr"]} for r in runs]
    assert common.replicate_spread(bare) == spread
