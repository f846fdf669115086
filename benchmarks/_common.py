"""Shared by the benchmark scripts (run as ``python benchmarks/<name>.py``)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from scipy.stats import chi2

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = Path(__file__).resolve().parent / "results"  # the results the READMEs quote
# The committed folder holds one result per script, under the script's own name. A run named
# otherwise (``--output NAME``: a replicate, a probe, other settings) goes to results/runs/, and
# a --quick run, a smoke test, writes everything to results/quick/: both git-ignored, so neither
# can replace a committed result.
RUNS = COMMITTED / "runs"
QUICK = "--quick" in sys.argv[1:]
RESULTS = COMMITTED / "quick" if QUICK else COMMITTED
if str(ROOT) not in sys.path:  # run from a checkout without ``pip install -e .``
    sys.path.insert(0, str(ROOT))


def set_threads(threads: int) -> None:
    """Pin torch's intra-op threads. The tensors are tiny (64 particles), so one thread is the
    fast setting: on a busy 2-core box two threads measured 5-30× slower (thread hand-offs)."""
    torch.set_num_threads(threads)


def environment(threads: int) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": threads,
        "load_average": list(os.getloadavg()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **source_tree(),
    }


def checkout(ref: str, into: Path) -> Path:
    """The code of git ``ref`` extracted into ``into`` (a baseline run beside this checkout)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def source_tree() -> dict[str, Any]:
    """The commit the figures came from, and whether the code differed from it (a result from
    an uncommitted tree cannot be reproduced later). None outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    changes = git("status", "--porcelain", "--", "modelcompare", "estimators", "models", "service",
                  "benchmarks")
    uncommitted = None if changes is None else any(
        line.endswith(".py") for line in changes.splitlines()
    )
    return {"commit": commit, "uncommitted_code": uncommitted}


def linear_stream(
    rows: int, seed: int, inputs: int = 5, post: int = 500
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Linear regression data in ``post``-row chunks: x ~ N(0, I), (w, b) ~ N(0, I) (the
    prior), y = wᵀx + b + N(0, 1). Generated chunk by chunk from one seeded generator."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(inputs + 1, generator=g, dtype=torch.float64)
    for start in range(0, rows, post):
        size = min(post, rows - start)
        x = torch.randn(size, inputs, generator=g, dtype=torch.float64)
        noise = torch.randn(size, generator=g, dtype=torch.float64)
        yield x, x @ weights[:-1] + weights[-1] + noise


def logistic_data(rows: int, seed: int, inputs: int, classes: int) -> tuple[torch.Tensor, ...]:
    """Softmax-regression data with weights from the N(0, 1) prior."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(classes, inputs + 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, inputs, generator=g, dtype=torch.float64)
    logits = x @ weights[:, :-1].T + weights[:, -1]
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g)[:, 0].to(torch.float64)
    return x, y


def log_checkpoints(first: int, last: int, count: int, step: int) -> list[int]:
    """About ``count`` log-spaced multiples of ``step`` from ``first`` to ``last``."""
    points = {
        max(step, round(first * (last / first) ** (i / (count - 1)) / step) * step)
        for i in range(count)
    }
    return sorted(p for p in points if p <= last)


def exact_steps(tracker: Any) -> int | None:
    """The annealing steps of an ``OnlineEvidence`` tracker's exact phase (``reestimate``; None: a
    method or islands that keep no such single count)."""
    slot = getattr(tracker.state, "reestimate", None)
    return int(slot.exact_steps) if slot is not None and slot.exact_steps.dim() == 0 else None


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def result_path(path: str | Path | None, default: str) -> Path:
    """Where a result file goes. ``default`` is the script's own file name: without ``path`` it
    goes into the committed folder. A bare ``path`` or one into the committed folder under
    another name is a named run and goes to ``results/runs/``; any other path is taken as is.
    Under ``--quick`` whatever would land in the committed folder or ``runs/`` goes to
    ``results/quick/``."""
    target = Path(path) if path is not None else Path(default)
    if target.parent == Path():
        target = COMMITTED / target
    if target.resolve().parent == COMMITTED and target.name != default:
        target = RUNS / target.name
    if QUICK and target.resolve().parent in (COMMITTED, RUNS):
        target = RESULTS / target.name
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def earlier_result(path: str | Path) -> Path:
    """An earlier output named as ``--output`` named it: a bare name is looked up in
    ``results/runs/`` (under ``--quick``, ``results/quick/``) and then the committed folder."""
    target = Path(path)
    if target.parent != Path():
        return target
    for folder in ((RESULTS,) if QUICK else (RUNS, COMMITTED)):
        if (folder / target).exists():
            return folder / target
    return (RESULTS if QUICK else RUNS) / target


def write_json(name: str, payload: dict[str, Any], path: str | Path | None = None) -> Path:
    """Write ``payload`` to ``path``, or to the committed ``<name>.json`` (see ``result_path``)."""
    target = result_path(path, f"{name}.json")
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    temporary.replace(target)
    return target


def mixture_data(rows: int, seed: int, components: int = 5, spread: float = 0.7) -> torch.Tensor:
    """2-D rows from an equal-weight mixture of ``components`` Gaussians with means on a circle of
    radius 3 and standard deviation ``spread`` per coordinate (a fixed, well-separated truth)."""
    g = torch.Generator().manual_seed(seed)
    angles = 2 * math.pi * torch.arange(components, dtype=torch.float64) / components
    means = 3.0 * torch.stack([angles.cos(), angles.sin()], dim=1)
    labels = torch.randint(0, components, (rows,), generator=g)
    return means[labels] + spread * torch.randn(rows, 2, generator=g, dtype=torch.float64)


def replicate_spread(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the spread of ``runs``' errors is made of, where they hold several engine seeds of
    the same data sets (``dataset``, within a ``family`` and ``stream`` where given): a one-way
    analysis of variance with the data sets as groups, over the data sets with at least two
    finite runs (None where there are none).

    - ``within``: the variance of log Ẑ between engine seeds on the same rows, pooled over the
      data sets (Σ_d Σ (e − ē_d)² / Σ_d (n_d − 1)): the Monte Carlo noise the stderr measures;
    - ``reported``: the mean reported stderr² of those runs, ``ratio`` = within / reported and
      ``ratio_if_calibrated``, its 95% range for an exactly calibrated stderr (χ² with
      Σ_d (n_d − 1) degrees of freedom);
    - ``bias_mean``, ``bias_variance``: the mean of the data sets' mean errors ē_d, and their
      variance less what their own noise (within / n_d) and the reference's (stderr_ref²) give:
      an error that repeats on the same rows, which no estimate of the variance can report.
    """
    groups: dict[tuple[Any, Any, int], list[dict[str, Any]]] = {}
    for r in runs:
        if math.isfinite(r.get("error", math.nan)):
            groups.setdefault((r.get("family"), r.get("stream"), r["dataset"]), []).append(r)
    sets = [members for members in groups.values() if len(members) >= 2]
    if not sets:
        return None
    squares = sum(sum((r["error"] - statistics.fmean(e["error"] for e in members)) ** 2
                      for r in members) for members in sets)
    freedom = sum(len(members) - 1 for members in sets)
    within = squares / freedom
    reported = statistics.fmean(r["stderr"] ** 2 for members in sets for r in members)
    means = [statistics.fmean(r["error"] for r in members) for members in sets]
    own = statistics.fmean(within / len(members) + members[0].get("reference_stderr", 0.0) ** 2
                           for members in sets)
    low, high = chi2.ppf([0.025, 0.975], freedom) / freedom
    return {
        "data_sets": len(sets),
        "runs": sum(len(members) for members in sets),
        "within": within,
        "reported": reported,
        "ratio": within / reported,
        "ratio_if_calibrated": (float(low), float(high)),
        "bias_mean": statistics.fmean(means),
        "bias_variance": statistics.variance(means) - own if len(sets) > 1 else math.nan,
    }


def spread_line(spread: dict[str, Any]) -> str:
    """``replicate_spread``'s figures in words."""
    low, high = spread["ratio_if_calibrated"]
    return (f"variance between engine seeds on the same rows {spread['within']:.3f} against the "
            f"reported stderr² {spread['reported']:.3f} (ratio {spread['ratio']:.2f}, "
            f"{low:.2f}–{high:.2f} by chance); error that repeats on the same rows: mean "
            f"{spread['bias_mean']:+.3f}, variance across data sets {spread['bias_variance']:.3f}")
