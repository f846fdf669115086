"""Where Var(log Ẑ) accrues on a long linear-regression stream, with and without the score's
control variates of the increments (``increment_control``; docs/design/moves.md).

The data of ``accuracy.py``'s 1e6 rows (5 inputs + bias, 500-row POSTs, data seed ``--seed``),
run once per setting with the same engine seed. At log-spaced n it prints the error against the
exact log Z, the reported variance and the seconds spent so far; a plain increment's variance
grows by about (D / M) per e-fold of n (each chunk's weight has relative variance ≈ D·c/n under
the posterior), the controlled one stays near its value at 1e4.

    python benchmarks/increment_variance.py                 # 1e6 rows, data seeds 0-4
    python benchmarks/increment_variance.py --quick         # 2e4 rows, seed 0

Writes results/increment_variance.json.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import environment, linear_stream, result_path, set_threads, table, write_json

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.models import LinearRegression

INPUTS, POST = 5, 500
CONTROLS = ("none", "score")


def marks(rows: int) -> list[int]:
    """1, 2, 5 × powers of ten from 1e3 to ``rows``, and ``rows``."""
    found = {m * 10**k for k in range(3, 7) for m in (1, 2, 5) if m * 10**k <= rows}
    return sorted(found | {rows})


def run(rows: int, seed: int, control: str) -> list[dict[str, Any]]:
    model = LinearRegression(INPUTS, noise_std=1.0, prior_std=1.0)
    tracker = OnlineEvidence(model, seed=seed, increment_control=control)
    exact = OnlineEvidence(model, method="exact")
    wanted, trace, seconds = set(marks(rows)), [], 0.0
    for x, y in linear_stream(rows, derive_seed("accuracy-data", rows, seed), INPUTS, POST):
        exact.update(x, y)
        begin = time.perf_counter()
        tracker.update(x, y)
        seconds += time.perf_counter() - begin
        if tracker.n_observations in wanted:
            trace.append({
                "n": tracker.n_observations,
                "error": tracker.log_evidence - exact.log_evidence,
                "variance": tracker.log_evidence_stderr**2,
                "seconds": seconds,
            })
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2e4 rows, one seed")
    parser.add_argument("--output", default="increment_variance.json")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.seeds = 2e4, 1
    set_threads(args.threads)
    rows = int(args.rows)
    runs = []
    for seed in range(args.seeds):
        traces = {control: run(rows, seed, control) for control in CONTROLS}
        runs.append({"seed": seed, **traces})
        print(f"\ndata and engine seed {seed}, {rows:,} rows: error / reported variance / seconds")
        print(table(
            ["n", *(f"{c} {k}" for c in CONTROLS for k in ("error", "variance", "s"))],
            [[a["n"], a["error"], a["variance"], a["seconds"], b["error"], b["variance"],
              b["seconds"]] for a, b in zip(traces["none"], traces["score"], strict=True)],
        ), flush=True)
    finals = {c: [r[c][-1] for r in runs] for c in CONTROLS}
    summary = {
        c: {
            "median_abs_error": sorted(abs(f["error"]) for f in finals[c])[len(finals[c]) // 2],
            "mean_variance": sum(f["variance"] for f in finals[c]) / len(finals[c]),
            "seconds": sum(f["seconds"] for f in finals[c]),
        }
        for c in CONTROLS
    }
    ratio = summary["score"]["seconds"] / summary["none"]["seconds"]
    print(f"\nat n = {rows:,} over {args.seeds} seeds: "
          + "; ".join(f"{c}: median |error| {s['median_abs_error']:.2f}, mean reported variance "
                      f"{s['mean_variance']:.3f}, {s['seconds']:.0f} s" for c, s in summary.items())
          + f"; time with controls / without {ratio:.2f}")
    output = result_path(args.output, "increment_variance.json")
    payload = {"benchmark": "increment_variance", "settings": vars(args),
               "environment": environment(args.threads), "summary": summary, "runs": runs}
    print(f"wrote {write_json('increment_variance', payload, output)}")


if __name__ == "__main__":
    main()
