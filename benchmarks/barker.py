"""The minibatch Barker MH correction: table error, data per test, log-Z bias.

1. The correction distribution: max |P(N(0,1) + X_corr ≤ y) − S(y)| (target ≤ 1e-3).
2. Data consumed per Barker test of a corrected SGHMC move (default settings, 10 moves) on
   posteriors at growing n, with and without control variates.
3. log Z error at equal wall time, corrected SGHMC (M = 64) against uncorrected SGHMC given the
   same or more time as more particles (M = 64, 128, 256), at the default learning rate and a
   coarse one (lr 0.5). Linear regression: against the exact log Z. Logistic regression: no
   closed form, so against a reference: the mean of SG-AIS runs with exact, Metropolis-corrected
   HMC moves on the full data throughout (full_batch_rows ≥ N), 128 particles.

    python benchmarks/barker.py            # full run (tens of minutes on 2 busy cores)
    python benchmarks/barker.py --quick    # smoke run

Prints tables, writes benchmarks/results/barker.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import torch
from _common import environment, logistic_data, set_threads, table, verdict, write_json

from modelcompare.estimators import EstimatorError, OnlineEvidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.estimators.moves.barker import build_correction_table, max_cdf_gap
from modelcompare.estimators.moves.corrected import corrected_sghmc_move
from modelcompare.estimators.moves.minibatch_target import MinibatchTarget
from modelcompare.estimators.online.target import PastData, anchor_at, grad_log_target
from modelcompare.estimators.smc.covariance import particle_scale
from modelcompare.models import LinearRegression, LogisticRegression, Model

GAP_TARGET = 1e-3
LINEAR_INPUTS, LOGISTIC_INPUTS, POST = 5, 3, 500


def correction_section() -> dict[str, Any]:
    start = time.perf_counter()
    table_ = build_correction_table()
    seconds = time.perf_counter() - start
    mean = float(table_.probabilities @ table_.values)
    variance = float(table_.probabilities @ table_.values**2) - mean**2
    gap = max_cdf_gap(table_)
    print(
        f"correction table: max CDF gap {gap:.2e} (target ≤ {GAP_TARGET:g}: "
        f"{verdict(gap <= GAP_TARGET)}), variance {variance:.5f} (π²/3 − 1 = "
        f"{math.pi**2 / 3 - 1:.5f}), built in {seconds:.3f} s"
    )
    return {
        "max_cdf_gap": gap,
        "target": GAP_TARGET,
        "variance": variance,
        "mean": mean,
        "build_seconds": seconds,
        "support_points": len(table_.values),
    }


def linear_rows(rows: int, seed: int) -> Rows:
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(LINEAR_INPUTS + 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, LINEAR_INPUTS, generator=g, dtype=torch.float64)
    noise = torch.randn(rows, generator=g, dtype=torch.float64)
    return Rows(x, x @ weights[:-1] + weights[-1] + noise)


def problem(family: str, rows: int, seed: int) -> tuple[Model, Rows]:
    if family == "linear":
        return LinearRegression(LINEAR_INPUTS), linear_rows(rows, seed)
    x, y = logistic_data(rows, seed, LOGISTIC_INPUTS, 2)
    return LogisticRegression(LOGISTIC_INPUTS, 2), Rows(x, y)


def rows_per_test(family: str, n: int, control_variates: bool, seed: int) -> dict[str, Any]:
    """Corrected moves on the n-row posterior, particles from an SG-AIS run on the same rows."""
    model, data = problem(family, n, seed)
    tracker = OnlineEvidence(model, seed=seed)
    for start in range(0, n, POST):
        tracker.update(data.x[start : start + POST], data.y[start : start + POST])
    theta, log_w = tracker.state.particles, tracker.state.log_weights
    history = RowsHistory(data)
    g = torch.Generator().manual_seed(seed)
    scale = particle_scale(theta, log_w)
    anchor = anchor_at(model, torch.softmax(log_w, 0) @ theta, history)
    past = PastData(history, None, 100, anchor)  # gradients always with control variates
    target = MinibatchTarget(model, history, anchor=anchor if control_variates else None)

    def grad(position: torch.Tensor) -> torch.Tensor:
        return grad_log_target(model, position, Rows(None, None), 0.0, past, g)

    rows, accepted, seconds = [], [], 0.0
    for _ in range(10):
        start = time.perf_counter()
        move = corrected_sghmc_move(theta, target, grad, 0.05, scale, 0.1, 20, 100, g)
        seconds += time.perf_counter() - start
        theta = move.position
        rows.append(float(move.test.rows.double().mean()))
        accepted.append(float(move.test.accept.double().mean()))
    return {
        "family": family,
        "n": n,
        "control_variates": control_variates,
        "rows_per_test": statistics.mean(rows),
        "fraction_of_n": statistics.mean(rows) / n,
        "acceptance": statistics.mean(accepted),
        "seconds_per_move": seconds / 10,
    }


def stream_run(family: str, rows: int, seed: int, **settings: Any) -> tuple[float, float, float]:
    """(log Z estimate, its stderr, seconds) of one SG-AIS run with estimator seed ``seed`` over
    one fixed data set in ``POST``-row chunks; NaN when the run fails (``EstimatorError``:
    diverging particles)."""
    model, data = problem(family, rows, derive_seed("barker-data", family, rows))
    tracker = OnlineEvidence(model, seed=seed, **settings)
    start = time.perf_counter()
    try:
        for first in range(0, rows, POST):
            tracker.update(data.x[first : first + POST], data.y[first : first + POST])
    except EstimatorError:
        return math.nan, math.nan, time.perf_counter() - start
    return tracker.log_evidence, tracker.log_evidence_stderr, time.perf_counter() - start


def reference_log_z(family: str, rows: int, args: argparse.Namespace) -> list[float]:
    """The exact log Z (linear), or exact-HMC SG-AIS estimates (logistic), one per seed."""
    model, data = problem(family, rows, derive_seed("barker-data", family, rows))
    if family == "linear":  # closed-form sequential updates (the batch formula is O(N³))
        exact = OnlineEvidence(model, method="exact")
        exact.update(data.x, data.y)
        return [exact.log_evidence]
    settings = {"particles": args.reference_particles, "full_batch_rows": rows}
    seeds = range(1000, 1000 + args.reference_seeds)
    return [stream_run(family, rows, seed, **settings)[0] for seed in seeds]


def finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.mean(finite) if finite else math.nan


def bias_section(family: str, rows: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    references = reference_log_z(family, rows, args)
    reference = statistics.mean(references)
    print(f"  {family} N={rows}: reference log Z {reference:.3f} from {references}", flush=True)
    records = []
    for lr in args.lrs:
        runs = [("barker", 64)] + [("none", m) for m in (64, 128, 256)]
        for correction, particles in runs:
            results = [
                stream_run(
                    family,
                    rows,
                    seed,
                    particles=particles,
                    lr=lr,
                    full_batch_rows=args.full_batch_rows,
                    mh_correction=correction,
                )
                for seed in range(args.seeds)
            ]
            errors = [value - reference for value, _stderr, _took in results]
            record = {
                "family": family,
                "rows": rows,
                "lr": lr,
                "mh_correction": correction,
                "particles": particles,
                "mean_error": finite_mean(errors),
                "failed_runs": sum(not math.isfinite(e) for e in errors),
                "errors": errors,
                "mean_stderr": finite_mean([stderr for _value, stderr, _took in results]),
                "mean_seconds": statistics.mean(took for _value, _stderr, took in results),
                "reference": reference,
                "references": references,
            }
            records.append(record)
            print(
                f"  {family} lr={lr} {correction} M={particles}: error {record['mean_error']:+.3f}"
                f" ± {record['mean_stderr']:.3f} ({record['failed_runs']} failed), "
                f"{record['mean_seconds']:.1f} s",
                flush=True,
            )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--linear-rows", type=int, default=20_000)
    parser.add_argument("--logistic-rows", type=int, default=5_000)
    parser.add_argument(
        "--full-batch-rows",
        type=int,
        default=100,
        help="exact HMC up to this n in the compared runs (default 100)",
    )
    parser.add_argument("--reference-particles", type=int, default=128)
    parser.add_argument("--reference-seeds", type=int, default=2)
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.05, 0.2, 0.5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.linear_rows, args.logistic_rows = 1, 2_000, 1_000
        args.reference_seeds, args.reference_particles = 1, 64
    set_threads(args.threads)
    payload: dict[str, Any] = {"environment": environment(args.threads), "args": vars(args)}
    payload["correction"] = correction_section()

    sizes = {
        "linear": [1_000, 10_000] + ([] if args.quick else [100_000]),
        "logistic": [1_000] + ([] if args.quick else [10_000]),
    }
    tests = []
    for family, ns in sizes.items():
        for n in ns:
            for control_variates in (True, False) if n <= 10_000 else (True,):
                tests.append(rows_per_test(family, n, control_variates, seed=0))
    payload["rows_per_test"] = tests
    print(
        "\nData consumed per Barker test (10 corrected SGHMC moves, 64 particles, first "
        "minibatch 100 rows)"
    )
    print(
        table(
            [
                "family",
                "n",
                "control variates",
                "rows / test",
                "fraction of n",
                "acceptance",
                "s / move",
            ],
            [
                [
                    t["family"],
                    t["n"],
                    t["control_variates"],
                    t["rows_per_test"],
                    t["fraction_of_n"],
                    t["acceptance"],
                    t["seconds_per_move"],
                ]
                for t in tests
            ],
        )
    )

    print("\nlog Z error at equal wall time (mean over seeds)")
    bias = bias_section("linear", args.linear_rows, args)
    bias += bias_section("logistic", args.logistic_rows, args)
    payload["bias"] = bias
    print(
        table(
            ["family", "N", "lr", "correction", "M", "mean error", "stderr", "failed", "s / run"],
            [
                [
                    b["family"],
                    b["rows"],
                    b["lr"],
                    b["mh_correction"],
                    b["particles"],
                    b["mean_error"],
                    b["mean_stderr"],
                    b["failed_runs"],
                    b["mean_seconds"],
                ]
                for b in bias
            ],
        )
    )
    print("wrote", write_json("barker", payload, args.output))


if __name__ == "__main__":
    main()
