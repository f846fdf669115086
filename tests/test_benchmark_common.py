"""A ``--quick`` benchmark run never overwrites the committed results (benchmarks/_common.py):
it writes to results/quick/, even when told to write into the committed folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


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
