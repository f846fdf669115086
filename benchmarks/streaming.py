"""The cost of keeping log Z current after every 500-row chunk, up to N = 1e5.

SG-AIS absorbs each chunk once: its total is measured, one pass of 200 updates. A full-data
reference (AIS, nested sampling) must be re-run on all rows after every chunk: 200 runs on
N_k = 500·k rows. Those totals are extrapolated from a measured sample of re-runs, N in
``--sample-n`` (each a real run, killed at ``--budget-s``): a power law T(N) = a·N^b is fitted
to the sampled (N, seconds) by least squares on log T vs log N, and

    total = Σ_{k=1}^{200} a · (500·k)^b

(the measured sample replaces its own terms where a sampled N is a multiple of 500).

    python benchmarks/streaming.py --quick                # linear only, N sample 500..2000
    nice python benchmarks/streaming.py                    # three models, N sample 500..8000

Times are CPU seconds (``time.process_time``, one torch thread; the machine is shared). Writes
results/streaming.json and prints the ratio total(re-runs) / total(SG-AIS) per model.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import environment, set_threads, table, write_json
from paper import REFERENCES, build, run_limited, simulate

from modelcompare.estimators import OnlineEvidence


def sgais_pass(name: str, rows: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One SG-AIS pass in ``args.chunk``-row updates: seconds per update and the total."""
    tracker = OnlineEvidence(build(name), particles=args.particles, seed=args.seed)
    seconds = []
    for start in range(0, rows.count, args.chunk):
        piece = rows.slice(start, start + args.chunk)
        begin = time.process_time()
        tracker.update(piece.x, piece.y)
        seconds.append(time.process_time() - begin)
    return {
        "updates": len(seconds),
        "total_seconds": sum(seconds),
        "max_update_seconds": max(seconds),
        "last_update_seconds": seconds[-1],
        "log_z": tracker.log_evidence,
        "stderr": tracker.log_evidence_stderr,
    }


def rerun_total(name: str, method: str, rows: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Measured re-runs at the sampled N, the fitted power law and the extrapolated total."""
    sample = []
    for n in sorted(int(n) for n in args.sample_n):
        print(f"{name}: {method} re-run at N = {n:,}", flush=True)
        result, used = run_limited(name, method, rows.slice(0, n), args, args.budget_s)
        if result is None or "error" in result:
            reason = "killed at the wall budget" if result is None else result["error"]
            sample.append({"n": n, "status": reason, "cpu_seconds_when_killed": used})
            break  # larger N would only take longer
        sample.append({"n": n, "status": "ran", **result})
    ran = [s for s in sample if s["status"] == "ran"]
    out: dict[str, Any] = {"sample": sample}
    if len(ran) < 2:
        out["total_seconds"] = None
        out["reason"] = "fewer than two re-runs finished within budget: no fit"
        return out
    b, log_a = np.polyfit(np.log([s["n"] for s in ran]), np.log([s["seconds"] for s in ran]), 1)
    measured = {s["n"]: s["seconds"] for s in ran}
    sizes = range(args.chunk, rows.count + 1, args.chunk)
    terms = [measured.get(n, float(np.exp(log_a) * n**b)) for n in sizes]
    out.update(
        {
            "fit": {"a": float(np.exp(log_a)), "b": float(b)},
            "formula": f"sum_k a*({args.chunk}k)^b, a = {np.exp(log_a):.3g}, b = {b:.3f}, "
            f"k = 1..{len(terms)}",
            "total_seconds": float(sum(terms)),
            "measured_share": sum(measured.get(n, 0.0) for n in sizes) / sum(terms),
        }
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["linear", "logistic", "mixture"])
    parser.add_argument("--methods", nargs="+", default=["ais", "nested"], choices=REFERENCES)
    parser.add_argument("--max-n", type=float, default=1e5)
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument("--sample-n", nargs="+", type=float, default=[500, 2000, 8000])
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall s per re-run")
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--live-points", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="linear, N = 1e4, sample 500..2000")
    args = parser.parse_args()
    if args.quick:
        args.models, args.max_n, args.sample_n = ["linear"], 1e4, [500, 2000]
    set_threads(args.threads)
    models: dict[str, Any] = {}
    payload = {
        "benchmark": "streaming",
        "settings": vars(args),
        "environment": environment(args.threads),
        "extrapolation": "re-run total = sum_k a*(chunk*k)^b with a, b least squares on "
        "log seconds vs log N over the measured re-runs; measured values replace their terms",
        "models": models,
    }
    rows_out = []
    for name in args.models:
        rows = simulate(name, int(args.max_n), args.seed)
        print(f"{name}: SG-AIS pass over {rows.count:,} rows", flush=True)
        entry: dict[str, Any] = {"sgais": sgais_pass(name, rows, args)}
        for method in args.methods:
            entry[method] = rerun_total(name, method, rows, args)
            total = entry[method]["total_seconds"]
            ratio = None if total is None else total / entry["sgais"]["total_seconds"]
            entry[method]["ratio_to_sgais"] = ratio
            rows_out.append(
                [
                    name,
                    method,
                    entry["sgais"]["total_seconds"],
                    "no fit" if total is None else total,
                    "no fit" if ratio is None else f"{ratio:,.0f}×",
                    entry[method].get("formula", entry[method].get("reason", "")),
                ]
            )
            models[name] = entry
            write_json("streaming", payload)  # after every method: a stopped run keeps its part
    print(f"\nKeeping log Z current after every {args.chunk}-row chunk up to N = {args.max_n:,.0f}")
    print(table(["model", "re-run", "SG-AIS s", "re-runs s", "ratio", "extrapolation"], rows_out))
    print(f"\nwrote {write_json('streaming', payload)}")


if __name__ == "__main__":
    main()
