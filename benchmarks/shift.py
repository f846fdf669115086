"""Distribution shift: evidence increments per window, ordered versus shuffled data.

Linear regression (5 inputs + bias, σ = 1, N(0, 1) priors). The generating weights change twice:
w₀ for rows n < 1e3, w₁ for 1e3 ≤ n < 1e4, w₂ after (each drawn from the prior). The same rows
are streamed in order and shuffled. The model is exchangeable, so the exact final log Z is the
same for both orders, but the increments log p(window | past) are not: in order, the windows
right after a change are surprising (large negative increments) until the posterior has moved;
shuffled, every window looks alike. SG-AIS must follow the posterior across the jumps — the
hard case for its particle moves — so its running error against the exact value is reported for
both orders over ``--seeds`` seeds.

    python benchmarks/shift.py            # N = 5e4, 5 seeds
    python benchmarks/shift.py --quick    # N = 2e4, 2 seeds

Windows are 100 rows while n ≤ 2000, 500 rows after. Writes results/shift.json and shift.png.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch
from _common import environment, result_path, set_threads, table, write_json

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.models import LinearRegression

INPUTS, CHANGES = 5, (1_000, 10_000)


def shifted_data(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ N(0, I); y = wᵀx + b + N(0, 1) with (w, b) redrawn from the prior at each change."""
    g = torch.Generator().manual_seed(derive_seed("shift-data", seed))
    weights = torch.randn(len(CHANGES) + 1, INPUTS + 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, INPUTS, generator=g, dtype=torch.float64)
    regime = torch.bucketize(torch.arange(rows), torch.tensor(CHANGES), right=True)
    chosen = weights[regime]
    y = (
        (x * chosen[:, :-1]).sum(1)
        + chosen[:, -1]
        + torch.randn(rows, generator=g, dtype=torch.float64)
    )
    return x, y


def windows(rows: int) -> list[int]:
    """Window ends: every 100 rows to 2000, every 500 after."""
    return [*range(100, 2001, 100), *range(2500, rows + 1, 500)]


def stream(x: torch.Tensor, y: torch.Tensor, seed: int, particles: int) -> dict[str, Any]:
    """Exact and SG-AIS on the same windows: per-window increments and the running error."""
    model = LinearRegression(INPUTS)
    exact, sgais = (
        OnlineEvidence(model, method="exact"),
        OnlineEvidence(model, particles=particles, seed=seed),
    )
    trace, start = [], 0
    for stop in windows(x.shape[0]):
        exact_info = exact.update(x[start:stop], y[start:stop])
        sgais_info = sgais.update(x[start:stop], y[start:stop])
        trace.append(
            {
                "n": stop,
                "rows": stop - start,
                "exact_increment": exact_info.log_evidence_increment,
                "sgais_increment": sgais_info.log_evidence_increment,
                "error": sgais.log_evidence - exact.log_evidence,
                "stderr": sgais.log_evidence_stderr,
            }
        )
        start = stop
    return {"log_z_exact": exact.log_evidence, "log_z_sgais": sgais.log_evidence, "trace": trace}


def plot(runs: dict[str, list[dict[str, Any]]], path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for order, color in (("ordered", "C0"), ("shuffled", "C1")):
        first = runs[order][0]["trace"]
        n = [p["n"] for p in first]
        left.plot(
            n,
            [p["exact_increment"] / p["rows"] for p in first],
            color=color,
            label=f"{order}: exact",
        )
        left.plot(
            n,
            [p["sgais_increment"] / p["rows"] for p in first],
            color=color,
            ls="none",
            marker=".",
            ms=4,
            label=f"{order}: SG-AIS (seed 0)",
        )
        for i, run in enumerate(runs[order]):
            right.plot(
                n,
                [p["error"] for p in run["trace"]],
                color=color,
                lw=0.8,
                alpha=0.7,
                label=f"{order}" if i == 0 else None,
            )
    for axis in (left, right):
        for change in CHANGES:
            axis.axvline(change, color="grey", ls=":", lw=1)
        axis.set_xscale("log")
        axis.set_xlabel("n (rows seen)")
        axis.legend(fontsize=8)
    left.set(ylabel="log p(window | past) / rows", title="evidence increment per window")
    left.set_ylim(bottom=max(left.get_ylim()[0], -30))
    right.set(ylabel="log Ẑ − log Z (nats)", title="SG-AIS running error, all seeds")
    right.axhline(0.0, color="black", lw=0.6)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="N = 2e4, 2 seeds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.seeds = 20_000, 2
    set_threads(args.threads)
    x, y = shifted_data(args.rows, 0)
    order = torch.randperm(args.rows, generator=torch.Generator().manual_seed(1))
    data = {"ordered": (x, y), "shuffled": (x[order], y[order])}
    runs = {
        name: [stream(xs, ys, seed, args.particles) for seed in range(args.seeds)]
        for name, (xs, ys) in data.items()
    }
    summary = []
    for name, results in runs.items():
        errors = [r["log_z_sgais"] - r["log_z_exact"] for r in results]
        trace = results[0]["trace"]
        after = {c: next(p for p in trace if p["n"] > c) for c in CHANGES}
        summary.append(
            {
                "order": name,
                "log_z_exact": results[0]["log_z_exact"],
                "median_abs_error": statistics.median(abs(e) for e in errors),
                "max_abs_error": max(abs(e) for e in errors),
                "median_stderr": statistics.median(r["trace"][-1]["stderr"] for r in results),
                "increment_per_row_after_change": {
                    str(c): p["exact_increment"] / p["rows"] for c, p in after.items()
                },
                "increment_per_row_last_window": trace[-1]["exact_increment"] / trace[-1]["rows"],
            }
        )
    print(f"\nShift at n = {CHANGES}; N = {args.rows:,}; SG-AIS {args.seeds} seeds")
    print(
        table(
            [
                "order",
                "log Z exact",
                "median |err|",
                "max |err|",
                "median stderr",
                "exact incr/row after 1e3",
                "after 1e4",
                "last window",
            ],
            [
                [
                    s["order"],
                    s["log_z_exact"],
                    s["median_abs_error"],
                    s["max_abs_error"],
                    s["median_stderr"],
                    *s["increment_per_row_after_change"].values(),
                    s["increment_per_row_last_window"],
                ]
                for s in summary
            ],
        )
    )
    figure = plot(runs, str(result_path(None, "shift.png")))
    payload = {
        "benchmark": "shift",
        "settings": {**vars(args), "changes": CHANGES, "model": "linear_regression dim 5"},
        "environment": environment(args.threads),
        "summary": summary,
        "runs": runs,
        "plot": figure,
    }
    print(f"\nwrote {write_json('shift', payload)}" + (f" and {figure}" if figure else ""))


if __name__ == "__main__":
    main()
