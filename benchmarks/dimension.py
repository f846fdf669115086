"""Accuracy, calibration and cost of SG-AIS as the number of parameters D grows.

Linear regression with D − 1 inputs and a bias, σ = 1 known, N(0, 1) priors, x ~ N(0, I), true
weights drawn from the prior; N rows streamed in 500-row chunks through ``OnlineEvidence`` with
default settings (or those given with ``--setting``). The exact log Z comes from the ``exact``
method on the same chunks. Each run is one data set; runs go to ``--processes`` worker processes,
each on one torch thread, and their CPU seconds are the SG-AIS updates' own (process time).

    python benchmarks/dimension.py                   # D = 21, 41, 81, 161; 10 data sets; N = 1e4
    python benchmarks/dimension.py --quick           # D = 21, 41, 81; 2 data sets; N = 2,000
    python benchmarks/dimension.py --dims 81 --setting particles=128 --output p128.json

Targets: coverage of ±2 stderr ≥ 90% and RMS z within 0.85–1.15 over every run, median |error|
≤ 1.5 nats for each D, and CPU seconds per run at D = 161 at most 5× those at D = 41. Prints a
table per D and PASS/FAIL, writes benchmarks/results/dimension.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from _common import environment, linear_stream, result_path, set_threads, table, verdict, write_json

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.models import LinearRegression

DIMS = (21, 41, 81, 161)
COVERAGE_TARGET, RMS_Z_RANGE, MEDIAN_ERROR_TARGET, COST_RATIO_TARGET = 0.90, (0.85, 1.15), 1.5, 5.0


def run_one(dim: int, seed: int, rows: int, settings: dict[str, Any]) -> dict[str, Any]:
    """One data set of ``rows`` rows at ``dim`` parameters: SG-AIS against the exact log Z."""
    set_threads(1)
    model = LinearRegression(dim - 1, noise_std=1.0, prior_std=1.0)
    sgais = OnlineEvidence(model, seed=seed, **settings)
    exact = OnlineEvidence(model, method="exact")
    cpu, steps, surprises, diverged = 0.0, 0, 0, []
    for x, y in linear_stream(rows, derive_seed("dimension-data", dim, seed), dim - 1):
        exact.update(x, y)
        start = time.process_time()
        info = sgais.update(x, y)
        cpu += time.process_time() - start
        steps += int(info.annealing_steps)
        surprises += info.surprises
        if not math.isnan(info.diverged_fraction):
            diverged.append(info.diverged_fraction)
    error = sgais.log_evidence - exact.log_evidence
    stderr = sgais.log_evidence_stderr
    return {
        "dim": dim,
        "seed": seed,
        "log_z_exact": exact.log_evidence,
        "log_z": sgais.log_evidence,
        "error": error,
        "stderr": stderr,
        "z": error / stderr if stderr > 0 else math.nan,
        "cpu_seconds": cpu,
        "annealing_steps": steps,
        "surprises": surprises,  # pieces followed by surprise moves
        "diverged_fraction": statistics.fmean(diverged) if diverged else math.nan,
    }


def summarize(dim: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["error"] for r in runs]
    zs = [r["z"] for r in runs]
    return {
        "dim": dim,
        "runs": len(runs),
        "median_abs_error": statistics.median(abs(e) for e in errors),
        "mean_error": statistics.fmean(errors),
        "covered": sum(abs(z) <= 2 for z in zs),
        "rms_z": math.sqrt(statistics.fmean(z * z for z in zs)),
        "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
        "median_annealing_steps": statistics.median(r["annealing_steps"] for r in runs),
    }


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs, each value read as JSON (numbers, true/false), else as a string."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            settings[key] = value
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+")
    parser.add_argument("--datasets", type=int)
    parser.add_argument("--rows", type=float)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    dims = args.dims or (DIMS[:3] if args.quick else DIMS)
    datasets = args.datasets or (2 if args.quick else 10)
    rows = int(args.rows or (2_000 if args.quick else 10_000))
    settings = parse_settings(args.setting)
    target = result_path(args.output, "dimension.json")  # fails early on a bad --output
    jobs = [(dim, seed, rows, settings) for dim in dims for seed in range(datasets)]
    with ProcessPoolExecutor(args.processes) as pool:
        runs = list(pool.map(run_one, *zip(*jobs, strict=True)))
    summaries = [summarize(d, [r for r in runs if r["dim"] == d]) for d in dims]
    print(f"linear regression, N = {rows:,}, 500-row chunks, {datasets} data sets per D, "
          f"settings {settings or 'default'}")
    print(table(
        ["D", "median |err|", "mean err", "covered", "RMS z", "CPU s/run", "steps/run"],
        [[s["dim"], f"{s['median_abs_error']:.2f}", f"{s['mean_error']:+.2f}",
          f"{s['covered']}/{s['runs']}", f"{s['rms_z']:.2f}", f"{s['median_cpu_seconds']:.1f}",
          f"{s['median_annealing_steps']:.0f}"] for s in summaries],
    ))
    zs = [r["z"] for r in runs]
    coverage = sum(abs(z) <= 2 for z in zs) / len(zs)
    rms_z = math.sqrt(statistics.fmean(z * z for z in zs))
    checks = {
        "coverage": coverage >= COVERAGE_TARGET,
        "rms_z": RMS_Z_RANGE[0] <= rms_z <= RMS_Z_RANGE[1],
        "median_error": all(s["median_abs_error"] <= MEDIAN_ERROR_TARGET for s in summaries),
    }
    cost = {s["dim"]: s["median_cpu_seconds"] for s in summaries}
    cost_ratio = cost[161] / cost[41] if 161 in cost and 41 in cost else None
    if cost_ratio is not None:
        checks["cost_161_over_41"] = cost_ratio <= COST_RATIO_TARGET
    print(f"coverage of ±2 stderr {coverage:.0%} (target ≥ {COVERAGE_TARGET:.0%}): "
          f"{verdict(checks['coverage'])}")
    print(f"RMS z {rms_z:.2f} (target {RMS_Z_RANGE[0]}–{RMS_Z_RANGE[1]}): "
          f"{verdict(checks['rms_z'])}")
    print(f"median |error| ≤ {MEDIAN_ERROR_TARGET} nats at every D: "
          f"{verdict(checks['median_error'])}")
    if cost_ratio is not None:
        print(f"CPU s per run, D = 161 / D = 41: {cost_ratio:.1f}× (target ≤ "
              f"{COST_RATIO_TARGET:.0f}×): {verdict(checks['cost_161_over_41'])}")
    path = write_json("dimension", {
        "environment": environment(1),
        "rows": rows,
        "datasets": datasets,
        "settings": settings,
        "summaries": summaries,
        "coverage": coverage,
        "rms_z": rms_z,
        "cost_ratio_161_41": cost_ratio,
        "checks": checks,
        "runs": runs,
    }, target)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
