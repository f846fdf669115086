"""Paths of partial posteriors: unbiasedness against exact conjugate posterior
expectations, and cost against N.

1. Unbiasedness. Linear regression (3 inputs + bias, σ = 1, N(0, 1) priors) and Beta–Bernoulli
   (Beta(2, 3), p = 0.3) at N = 2^14: R debiased estimates of the posterior mean, second moment
   and predictive mean, each coordinate's z = (estimate − exact) / stderr. Under unbiasedness the
   z's are ~N(0, 1): the table shows max |z| and the mean of z² (≈ 1).
2. Cost. Beta–Bernoulli at N = 2^10 … 2^20 and α ∈ {0.25, 0.5, 0.75}: rows read per repetition
   (counted), against E[n_T] = Σ_t P(T = t) n_t and N; the log-log slope of rows against N is
   1 − α. Seconds per repetition against the seconds of one exact full-data posterior.

    python benchmarks/partial_posteriors.py [--repetitions 4000] [--quick]

Writes benchmarks/results/partial_posteriors.json.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch
from _common import environment, set_threads, table, verdict, write_json

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.functionals.partial_posteriors import (
    ConjugatePath,
    debiased_expectation,
    expected_rows,
)
from modelcompare.estimators.functionals.posterior_functionals import (
    Functional,
    conjugate_expectation,
)
from modelcompare.models import BetaBernoulli, LinearRegression
from modelcompare.models.base import ConjugateModel

F64 = torch.float64


def regression_data(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 3, generator=g, dtype=F64)
    w = torch.randn(4, generator=g, dtype=F64)
    return x, x @ w[:3] + w[3] + torch.randn(n, generator=g, dtype=F64)


def bernoulli_data(n: int, g: torch.Generator) -> torch.Tensor:
    return (torch.rand(n, generator=g, dtype=F64) < 0.3).to(F64)


def unbiasedness(repetitions: int, n: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(2015)
    x, y = regression_data(n, g)
    yb = bernoulli_data(n, g)
    cases: list[tuple[str, ConjugateModel, Rows, torch.Tensor | None]] = [
        ("linear_regression", LinearRegression(3), Rows(x, y), x[:4]),
        ("beta_bernoulli", BetaBernoulli(2.0, 3.0), Rows(None, yb), None),
    ]
    results = []
    for family, model, rows, query in cases:
        stats = model.update_stats(model.prior_stats(), rows.x, rows.y)
        for kind in ("mean", "second_moment", "predictive"):
            functional = Functional(kind, query if kind == "predictive" else None)
            exact = conjugate_expectation(model, stats, functional)
            started = time.perf_counter()
            result = debiased_expectation(ConjugatePath(model), rows, functional, g,
                                          repetitions=repetitions)
            z = (result.estimate - exact) / result.stderr
            results.append({
                "family": family, "functional": kind, "n": n, "repetitions": repetitions,
                "estimate": result.estimate.tolist(), "exact": exact.tolist(),
                "stderr": result.stderr.tolist(), "z": z.tolist(),
                "max_abs_z": float(z.abs().max()), "mean_z2": float((z**2).mean()),
                "rows_per_repetition": result.rows_used / repetitions,
                "seconds": time.perf_counter() - started,
            })
    return results


def cost(sizes: list[int], alphas: list[float], repetitions: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(7)
    model, results = BetaBernoulli(2.0, 3.0), []
    for n in sizes:
        y = bernoulli_data(n, g)
        started = time.perf_counter()
        model.update_stats(model.prior_stats(), None, y)
        full_seconds = time.perf_counter() - started
        for alpha in alphas:
            started = time.perf_counter()
            result = debiased_expectation(ConjugatePath(model), Rows(None, y), Functional("mean"),
                                          g, repetitions=repetitions, alpha=alpha)
            seconds = (time.perf_counter() - started) / repetitions
            results.append({
                "n": n, "alpha": alpha, "repetitions": repetitions,
                "rows_per_repetition": result.rows_used / repetitions,
                "expected_rows": expected_rows(n, alpha, 16),
                "rows_fraction_of_n": result.rows_used / repetitions / n,
                "seconds_per_repetition": seconds, "full_posterior_seconds": full_seconds,
            })
    return results


def slopes(rows: list[dict[str, Any]], key: str) -> dict[float, float]:
    out = {}
    for alpha in sorted({r["alpha"] for r in rows}):
        points = [(math.log(r["n"]), math.log(r[key])) for r in rows if r["alpha"] == alpha]
        mx = sum(p[0] for p in points) / len(points)
        my = sum(p[1] for p in points) / len(points)
        out[alpha] = (sum((a - mx) * (b - my) for a, b in points)
                      / sum((a - mx) ** 2 for a, _ in points))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="smaller N and R")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    repetitions = 500 if args.quick else args.repetitions
    n = 2**12 if args.quick else 2**14
    sizes = [2**k for k in range(10, 15 if args.quick else 21, 2)]

    bias = unbiasedness(repetitions, n)
    print(f"Unbiasedness at N = {n}, R = {repetitions} (z = (estimate − exact) / stderr)")
    print(table(["family", "functional", "coords", "max |z|", "mean z²", "rows/rep", "s"],
                [[r["family"], r["functional"], len(r["z"]), r["max_abs_z"], r["mean_z2"],
                  r["rows_per_repetition"], r["seconds"]] for r in bias]))
    unbiased_ok = all(r["max_abs_z"] < 4.0 for r in bias)
    print(f"all |z| < 4: {verdict(unbiased_ok)}\n")

    costs = cost(sizes, [0.25, 0.5, 0.75], max(200, repetitions // 2))
    print("Cost against N (Beta–Bernoulli, rows read per repetition, counted)")
    print(table(["N", "alpha", "rows/rep", "E[n_T]", "rows/N", "ms/rep", "full-data ms"],
                [[r["n"], r["alpha"], r["rows_per_repetition"], r["expected_rows"],
                  r["rows_fraction_of_n"], 1e3 * r["seconds_per_repetition"],
                  1e3 * r["full_posterior_seconds"]] for r in costs]))
    measured, expected = slopes(costs, "rows_per_repetition"), slopes(costs, "expected_rows")
    for alpha in measured:
        print(f"alpha {alpha}: slope of log rows vs log N measured {measured[alpha]:.3f}, "
              f"expected-rows slope {expected[alpha]:.3f}, target 1 − α = {1 - alpha:.3f}")
    cost_ok = all(abs(expected[a] - (1 - a)) < 0.1 for a in expected)
    print(f"expected-cost slope within 0.1 of 1 − α: {verdict(cost_ok)}")

    path = write_json("partial_posteriors", {
        "environment": environment(args.threads),
        "unbiasedness": bias,
        "cost": costs,
        "slopes": {"measured": measured, "expected": expected},
        "verdicts": {"unbiased_all_abs_z_below_4": unbiased_ok, "cost_slope": cost_ok},
    }, args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
