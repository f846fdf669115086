"""Accuracy, calibration and cost of SG-AIS as the number of parameters D grows.

Linear regression with D − 1 inputs and a bias, σ = 1 known, N(0, 1) priors, x ~ N(0, I), true
weights drawn from the prior; N rows streamed in 500-row chunks through ``OnlineEvidence`` with
default settings (or those given with ``--setting``). The exact log Z comes from the ``exact``
method on the same chunks. Two models without a closed form are judged against Laplace
importance sampling on all rows (``references.laplace_importance``; z then divides by both
standard errors): softmax regression with 20 inputs × 5 classes (105 parameters; x ~ N(0, I),
weights from the prior, as in calibration.py) and Poisson regression with 100 inputs (101
parameters; x ~ N(0, I / 100) so that the log rate wᵀx + b has variance 2, weights from the
prior). Each run is one data set; runs go to ``--processes`` worker processes, each on one torch
thread, and their CPU seconds are the SG-AIS updates' own (process time).

    python benchmarks/dimension.py                   # linear D = 21, 41, 81, 161, softmax and
                                                     # poisson; 10 data sets; N = 1e4
    python benchmarks/dimension.py --quick           # linear D = 21, 41, 81; 2 data sets; N = 2,000
    python benchmarks/dimension.py --dims 81 --setting particles=128 --output p128.json
    python benchmarks/dimension.py --dims --families softmax poisson --output laplace.json

Targets: for linear regression, coverage of ±2 stderr ≥ 90% and RMS z within 0.85–1.15 over
every run, median |error| ≤ 1.5 nats for each D, and CPU seconds per run at D = 161 at most 5×
those at D = 41; softmax and Poisson within 2 stderr on at least 9 of 10 data sets. Prints a
table per case and PASS/FAIL, writes benchmarks/results/dimension.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch
from _common import (
    environment,
    exact_steps,
    linear_stream,
    logistic_data,
    result_path,
    set_threads,
    table,
    verdict,
    write_json,
)

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.references.laplace_importance import (
    LaplaceISSettings,
    run_laplace_is,
)
from modelcompare.models import LinearRegression, LogisticRegression, Model, PoissonRegression

DIMS = (21, 41, 81, 161)
FAMILIES = ("linear", "softmax", "poisson")
SOFTMAX_INPUTS, SOFTMAX_CLASSES, POISSON_INPUTS = 20, 5, 100
COVERAGE_TARGET, RMS_Z_RANGE, MEDIAN_ERROR_TARGET, COST_RATIO_TARGET = 0.90, (0.85, 1.15), 1.5, 5.0
LAPLACE_COVERED_TARGET = 0.9  # of the data sets within 2 stderr, softmax and Poisson
CHUNK = 500

Chunks = list[tuple[torch.Tensor, torch.Tensor]]


def model_of(family: str, dim: int) -> Model:
    if family == "linear":
        return LinearRegression(dim - 1, noise_std=1.0, prior_std=1.0)
    if family == "softmax":
        return LogisticRegression(SOFTMAX_INPUTS, classes=SOFTMAX_CLASSES)
    return PoissonRegression(POISSON_INPUTS)


def poisson_data(rows: int, seed: int, inputs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ N(0, I / inputs), (w, b) from the N(0, 1) prior, y ~ Poisson(exp(wᵀx + b))."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(inputs + 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, inputs, generator=g, dtype=torch.float64) / inputs**0.5
    return x, torch.poisson(torch.exp(x @ weights[:-1] + weights[-1]), generator=g)


def chunks_of(family: str, dim: int, seed: int, rows: int) -> Chunks:
    data_seed = derive_seed("dimension-data", dim, seed)
    if family == "linear":
        return list(linear_stream(rows, data_seed, dim - 1))
    if family == "softmax":
        x, y = logistic_data(rows, data_seed, SOFTMAX_INPUTS, SOFTMAX_CLASSES)
    else:
        x, y = poisson_data(rows, data_seed, POISSON_INPUTS)
    return [(x[i : i + CHUNK], y[i : i + CHUNK]) for i in range(0, rows, CHUNK)]


def reference(model: Model, family: str, chunks: Chunks, seed: int) -> dict[str, Any]:
    """The exact log Z (linear) or Laplace-IS on all rows, with its standard error."""
    if family == "linear":
        exact = OnlineEvidence(model, method="exact")
        for x, y in chunks:
            exact.update(x, y)
        return {"log_z": exact.log_evidence, "stderr": 0.0, "method": "exact"}
    rows = Rows(torch.cat([x for x, _ in chunks]), torch.cat([y for _, y in chunks]))
    result = run_laplace_is(model, rows, LaplaceISSettings(), torch.Generator().manual_seed(seed))
    return {
        "log_z": result.evidence.log_evidence,
        "stderr": result.evidence.log_evidence_stderr,
        "pareto_k": result.pareto_k,
        "method": "laplace_is",
    }


def run_one(
    family: str, dim: int, seed: int, rows: int, settings: dict[str, Any]
) -> dict[str, Any]:
    """One data set of ``rows`` rows of ``family`` at ``dim`` parameters: SG-AIS against the
    reference log Z."""
    set_threads(1)
    model = model_of(family, dim)
    chunks = chunks_of(family, dim, seed, rows)
    sgais = OnlineEvidence(model, seed=seed, **settings)
    cpu, steps, surprises, diverged, failed = 0.0, 0, 0, [], None
    ladders: list[int] = []  # each chunk's annealing steps
    reestimates: list[int] = []  # rows at which log Z was estimated again (``reestimate``)
    for index, (x, y) in enumerate(chunks):
        start = time.process_time()
        try:
            info = sgais.update(x, y)
        except EstimatorError as error:  # a failed run counts as not covered
            failed = f"chunk {index}: {error}"
            break
        finally:
            cpu += time.process_time() - start
        steps += int(info.annealing_steps)
        ladders.append(int(info.annealing_steps))
        if info.reestimated:
            reestimates.append(sgais.n_observations)
        surprises += info.surprises
        if not math.isnan(info.diverged_fraction):
            diverged.append(info.diverged_fraction)
    try:
        ref = reference(model, family, chunks, seed)
    except EstimatorError as error:
        ref, failed = {"log_z": math.nan, "stderr": math.nan}, failed or f"reference: {error}"
    error = math.nan if failed else sgais.log_evidence - ref["log_z"]
    stderr = math.hypot(sgais.log_evidence_stderr, ref["stderr"])
    return {
        "family": family,
        "dim": dim,
        "seed": seed,
        "reference": ref,
        "failed": failed,
        "log_z": math.nan if failed else sgais.log_evidence,
        "error": error,
        "stderr": sgais.log_evidence_stderr,
        "z": error / stderr if stderr > 0 else math.nan,
        "cpu_seconds": cpu,
        "annealing_steps": steps,
        "ladders": ladders,
        # the exact phase's steps: a later piece longer than them re-estimates
        "exact_steps": exact_steps(sgais),
        "reestimates": reestimates,
        "surprises": surprises,  # pieces followed by surprise moves
        "diverged_fraction": statistics.fmean(diverged) if diverged else math.nan,
    }


def run_blackjax(dim: int, seed: int, rows: int, particles: int) -> dict[str, Any]:
    """BlackJAX's adaptive tempered SMC (``peer_blackjax``) on the rows of linear data set
    ``seed`` at ``dim``, on one thread; imported here so that jax stays optional."""
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    from peer_blackjax import blackjax_log_evidence

    chunks = chunks_of("linear", dim, seed, rows)
    x, y = torch.cat([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
    found = blackjax_log_evidence(x, y, 1.0, 1.0, particles, seed)
    exact = reference(model_of("linear", dim), "linear", chunks, seed)["log_z"]
    return {"dim": dim, "seed": seed, "error": found["log_z"] - exact} | found


def summarize(family: str, dim: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors and z over the runs that finished; a failed run counts as not covered."""
    finished = [r for r in runs if not r["failed"]] or [{"error": math.nan, "z": math.nan}]
    errors = [r["error"] for r in finished]
    zs = [r["z"] for r in finished]
    return {
        "family": family,
        "dim": dim,
        "runs": len(runs),
        "failed": sum(bool(r["failed"]) for r in runs),
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


def cases(dims: list[int], families: list[str]) -> list[tuple[str, int]]:
    """(family, D): linear regression at each of ``dims``, then softmax and Poisson if asked."""
    linear = [("linear", dim) for dim in dims] if "linear" in families else []
    others = {"softmax": SOFTMAX_CLASSES * (SOFTMAX_INPUTS + 1), "poisson": POISSON_INPUTS + 1}
    return linear + [(family, others[family]) for family in families if family in others]


def linear_checks(summaries: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The linear targets over ``runs``, printed; the figures and verdicts."""
    zs = [r["z"] for r in runs if not r["failed"]]
    coverage = sum(abs(z) <= 2 for z in zs) / len(runs)
    rms_z = math.sqrt(statistics.fmean(z * z for z in zs)) if zs else math.nan
    checks = {
        "coverage": coverage >= COVERAGE_TARGET,
        "rms_z": RMS_Z_RANGE[0] <= rms_z <= RMS_Z_RANGE[1],
        "median_error": all(s["median_abs_error"] <= MEDIAN_ERROR_TARGET for s in summaries),
    }
    cost = {s["dim"]: s["median_cpu_seconds"] for s in summaries}
    cost_ratio = cost[161] / cost[41] if 161 in cost and 41 in cost else None
    if cost_ratio is not None:
        checks["cost_161_over_41"] = cost_ratio <= COST_RATIO_TARGET
    print(f"linear: coverage of ±2 stderr {coverage:.0%} (target ≥ {COVERAGE_TARGET:.0%}): "
          f"{verdict(checks['coverage'])}")
    print(f"linear: RMS z {rms_z:.2f} (target {RMS_Z_RANGE[0]}–{RMS_Z_RANGE[1]}): "
          f"{verdict(checks['rms_z'])}")
    print(f"linear: median |error| ≤ {MEDIAN_ERROR_TARGET} nats at every D: "
          f"{verdict(checks['median_error'])}")
    if cost_ratio is not None:
        print(f"linear: CPU s per run, D = 161 / D = 41: {cost_ratio:.1f}× (target ≤ "
              f"{COST_RATIO_TARGET:.0f}×): {verdict(checks['cost_161_over_41'])}")
    return {"coverage": coverage, "rms_z": rms_z, "cost_ratio_161_41": cost_ratio,
            "checks": checks}


def blackjax_table(runs: list[dict[str, Any]], peers: list[dict[str, Any]]) -> dict[str, Any]:
    """SG-AIS and BlackJAX on the same linear data sets, side by side (printed); per BlackJAX
    particle count, its median |error| and median CPU seconds as a multiple of SG-AIS's."""
    sgais = {(r["dim"], r["seed"]): r for r in runs if r["family"] == "linear"}
    rows, by_particles = [], {}
    for peer in peers:
        ours = sgais[peer["dim"], peer["seed"]]
        ratio = peer["cpu_seconds"] / ours["cpu_seconds"]
        by_particles.setdefault(peer["particles"], []).append((abs(peer["error"]), ratio))
        rows.append([peer["dim"], peer["seed"], f"{ours['error']:+.2f}", f"{ours['stderr']:.2f}",
                     f"{ours['cpu_seconds']:.1f}", peer["particles"], f"{peer['error']:+.2f}",
                     f"{peer['cpu_seconds']:.1f}", peer["tempering_steps"], f"{ratio:.1f}×"])
    print("SG-AIS (streamed, 500-row chunks) against BlackJAX adaptive tempered SMC (all rows at "
          "once), the same rows:")
    print(table(["D", "data set", "SG-AIS err", "stderr", "CPU s", "BlackJAX particles",
                 "BlackJAX err", "CPU s", "steps", "BlackJAX / SG-AIS CPU"], rows))
    return {str(particles): {"median_abs_error": statistics.median(e for e, _ in pairs),
                             "median_cpu_ratio": statistics.median(r for _, r in pairs)}
            for particles, pairs in by_particles.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="*", help="linear regression's D values")
    parser.add_argument("--families", nargs="+", choices=FAMILIES)
    parser.add_argument("--datasets", type=int)
    parser.add_argument("--rows", type=float)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--blackjax-dims", type=int, nargs="*",
                        help="linear D values BlackJAX also runs on (default 81; quick: none)")
    parser.add_argument("--blackjax-datasets", type=int, default=2)
    parser.add_argument("--blackjax-particles", type=int, nargs="+", default=[1000])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    dims = args.dims if args.dims is not None else list(DIMS[:3] if args.quick else DIMS)
    families = args.families or (["linear"] if args.quick else list(FAMILIES))
    datasets = args.datasets or (2 if args.quick else 10)
    rows = int(args.rows or (2_000 if args.quick else 10_000))
    settings = parse_settings(args.setting)
    target = result_path(args.output, "dimension.json")  # fails early on a bad --output
    todo = cases(dims, families)
    jobs = [(family, dim, seed, rows, settings) for family, dim in todo for seed in range(datasets)]
    linear_dims = [dim for family, dim in todo if family == "linear"]
    peer_dims = [dim for dim in (args.blackjax_dims if args.blackjax_dims is not None
                                 else [] if args.quick else [81]) if dim in linear_dims]
    peer_jobs = [(dim, seed, rows, particles) for dim in peer_dims
                 for seed in range(args.blackjax_datasets) for particles in args.blackjax_particles]
    with ProcessPoolExecutor(args.processes) as pool:
        peers = [pool.submit(run_blackjax, *job) for job in peer_jobs]
        runs = list(pool.map(run_one, *zip(*jobs, strict=True)))
        peer_runs = [peer.result() for peer in peers]
    summaries = [
        summarize(f, d, [r for r in runs if (r["family"], r["dim"]) == (f, d)]) for f, d in todo
    ]
    print(f"N = {rows:,}, {CHUNK}-row chunks, {datasets} data sets per case, "
          f"settings {settings or 'default'}")
    print(table(
        ["model", "D", "median |err|", "mean err", "covered", "failed", "RMS z", "CPU s/run",
         "steps/run"],
        [[s["family"], s["dim"], f"{s['median_abs_error']:.2f}", f"{s['mean_error']:+.2f}",
          f"{s['covered']}/{s['runs']}", s["failed"], f"{s['rms_z']:.2f}",
          f"{s['median_cpu_seconds']:.1f}", f"{s['median_annealing_steps']:.0f}"]
         for s in summaries],
    ))
    linear = [s for s in summaries if s["family"] == "linear"]
    results: dict[str, Any] = {}
    if linear:
        results["linear"] = linear_checks(linear, [r for r in runs if r["family"] == "linear"])
    for s in summaries:
        if s["family"] != "linear":
            passed = s["covered"] >= LAPLACE_COVERED_TARGET * s["runs"]
            results[s["family"]] = {"checks": {"within_2_stderr": passed}}
            print(f"{s['family']}: within 2 stderr of Laplace-IS on {s['covered']} of "
                  f"{s['runs']} (target ≥ {LAPLACE_COVERED_TARGET:.0%}): {verdict(passed)}")
    if peer_runs:
        results["blackjax"] = blackjax_table(runs, peer_runs)
    path = write_json("dimension", {
        "environment": environment(1),
        "rows": rows,
        "datasets": datasets,
        "settings": settings,
        "summaries": summaries,
        "results": results,
        "runs": runs,
        "blackjax_runs": peer_runs,
    }, target)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
