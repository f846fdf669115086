"""Throughput of SG-AIS with 64 particles and its cost per point.

Linear regression (5 inputs) streamed to N = 1e6 in 500-row POSTs: overall points/s, the rate over
points 1e4..2e4 and over the last tenth (9e5..1e6), and their ratio (flat cost per point);
logistic regression (10 inputs, 4 classes) over 1e5 points from the first row on (the exact-HMC
phase of the first 500 rows included); a 2-D, 5-component Gaussian mixture over 1e4 points; peak
memory (ru_maxrss) and the serialised state size next to the size of the data history.

``--baseline PATH`` runs every workload a second time on the estimators and models of another
source tree (e.g. ``git worktree add /tmp/mc-main <commit>``), interleaved with this tree's runs,
and prints both with their ratio. Each workload runs in its own process (fresh peak memory).

    python benchmarks/throughput.py                          # full: linear 1e6, logistic 1e5
    python benchmarks/throughput.py --baseline /tmp/mc-main  # and that tree, same run
    python benchmarks/throughput.py --quick    # linear 1e5 (late window 9e4..1e5), logistic 2e4,
                                               # mixture 2e3
    python benchmarks/throughput.py --device cuda   # the estimators on a GPU (float64)

Data is generated before the clock starts; time is wall-clock around ``OnlineEvidence.update``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _common import (
    ROOT,
    environment,
    linear_stream,
    log_checkpoints,
    logistic_data,
    mixture_data,
    set_threads,
    table,
    verdict,
    write_json,
)

LINEAR_TARGET, RATIO_TARGET, LOGISTIC_TARGET = 80_000.0, 0.9, 10_000.0
WORKLOADS = ("linear", "logistic", "mixture")
CHILD_RESULT = "workload result: "  # the line a child process reports its figures on


def peak_memory_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def stream(
    tracker: Any, x: torch.Tensor, y: torch.Tensor | None, post: int, sizes_at: set[int]
) -> tuple[list[tuple[int, float]], list[dict[str, Any]], int, float]:
    """Feed POSTs; returns (n, cumulative seconds) after each, state/history sizes at
    ``sizes_at``, the total number of annealing steps and the process CPU seconds of the
    updates (what other work on the machine does not inflate)."""
    from modelcompare.estimators import state_to_bytes

    clock, sizes, steps, elapsed, cpu = [(0, 0.0)], [], 0, 0.0, 0.0
    columns = x.shape[1] + (y is not None)  # x columns plus y, float64
    for start in range(0, x.shape[0], post):
        xs = x[start : start + post]
        ys = None if y is None else y[start : start + post]
        begin, cpu_begin = time.perf_counter(), time.process_time()
        info = tracker.update(xs, ys)
        elapsed += time.perf_counter() - begin
        cpu += time.process_time() - cpu_begin
        steps += info.annealing_steps
        n = tracker.n_observations
        clock.append((n, elapsed))
        if n in sizes_at:
            sizes.append(
                {
                    "n": n,
                    "state_bytes": len(state_to_bytes(tracker.state)),
                    "history_bytes": n * columns * 8,
                    "peak_memory_mib": peak_memory_mib(),
                }
            )
    return clock, sizes, steps, cpu


def rate(clock: list[tuple[int, float]], first: int, last: int) -> float:
    """Points per second between the POSTs ending at or after ``first`` and ``last``."""
    start = next(c for c in clock if c[0] >= first)
    stop = next(c for c in clock if c[0] >= last)
    return (stop[0] - start[0]) / (stop[1] - start[1])


def data(workload: str, rows: int, seed: int, post: int) -> tuple[torch.Tensor, Any, Any]:
    """The workload's rows (x, y or None) and its model."""
    from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression

    if workload == "linear":
        parts = list(linear_stream(rows, seed, 5, post))
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        return x, y, LinearRegression(5)
    if workload == "logistic":
        return *logistic_data(rows, seed, 10, 4), LogisticRegression(10, classes=4)
    return mixture_data(rows, seed), None, GaussianMixture(2, 5)


def run_workload(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """One workload on the estimators importable here; its figures."""
    from modelcompare import estimators
    from modelcompare.estimators import OnlineEvidence

    rows = int(getattr(args, f"{workload}_n"))
    x, y, model = data(workload, rows, args.seed, args.post)
    memory_before = peak_memory_mib()
    tracker = OnlineEvidence(model, particles=args.particles, seed=args.seed, device=args.device)
    sizes_at = set(log_checkpoints(args.post * 2, rows, 4, args.post)) | {rows}
    clock, sizes, steps, cpu = stream(tracker, x, y, args.post, sizes_at)
    early, late = (10_000, 20_000), (rows - rows // 10, rows)
    result = {
        "source": str(Path(estimators.__file__).resolve().parent.parent),
        "n": rows,
        "seconds": clock[-1][1],
        "points_per_second": rows / clock[-1][1],
        "cpu_seconds": cpu,
        "first_500_seconds": next(seconds for n, seconds in clock if n >= 500),
        "second_half_points_per_second": (
            rate(clock, rows // 2, rows) if rows >= 2 * args.post else float("nan")
        ),
        "annealing_steps_per_post": steps / (rows / args.post),
        "log_evidence": float(tracker.log_evidence),
        "peak_memory_mib_before": memory_before,
        "peak_memory_mib": peak_memory_mib(),
        "sizes": sizes,
    }
    if workload == "linear":
        result |= {
            "early_window": early,
            "early_points_per_second": rate(clock, *early),
            "late_window": late,
            "late_points_per_second": rate(clock, *late),
            "trace": [{"n": n, "seconds": s} for n, s in clock[:: max(1, len(clock) // 200)]],
        }
        result["late_over_early"] = (
            result["late_points_per_second"] / result["early_points_per_second"]
        )
    return result


def measured_in_child(workload: str, args: argparse.Namespace, source: Path) -> dict[str, Any]:
    """``run_workload`` in a fresh interpreter whose ``estimators`` and ``models`` come from
    ``source`` (imported before anything else can put another tree first on sys.path)."""
    bootstrap = (
        "import sys, runpy; "
        f"sys.path[:0] = [{str(source)!r}, {str(Path(__file__).parent)!r}]; "
        "import modelcompare.estimators, modelcompare.models; "
        f"sys.argv = {[__file__, *child_arguments(workload, args)]!r}; "
        f"runpy.run_path({__file__!r}, run_name='__main__')"
    )
    completed = subprocess.run(
        [sys.executable, "-c", bootstrap], capture_output=True, text=True, check=False
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith(CHILD_RESULT)]
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:]
        return {"error": f"exit {completed.returncode}: {' '.join(tail)}"}
    return json.loads(lines[-1][len(CHILD_RESULT) :])


def child_arguments(workload: str, args: argparse.Namespace) -> list[str]:
    return [
        "--child",
        workload,
        *("--linear-n", str(args.linear_n), "--logistic-n", str(args.logistic_n)),
        *("--mixture-n", str(args.mixture_n), "--particles", str(args.particles)),
        *("--post", str(args.post), "--threads", str(args.threads), "--seed", str(args.seed)),
        *("--device", args.device),
    ]


def device_name(device: str) -> str:
    """What ``device`` is: "cpu", or the GPU's name."""
    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return device


def ratio(new: dict[str, Any], old: dict[str, Any] | None, key: str) -> Any:
    if old is None or key not in old or key not in new:
        return ""
    return new[key] / old[key]


def report(results: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]] | None) -> None:
    header = ["workload", "tree", "N", "seconds", "CPU s", "points/s", "first 500 s", "2nd half/s"]
    header += ["steps/POST", "log Z", "× baseline"]
    rows = []
    for workload, result in results.items():
        runs = [("this", result)] + ([("baseline", baseline[workload])] if baseline else [])
        for tree, run in runs:
            if "error" in run:
                rows.append([workload, tree, "FAILED", run["error"], *[""] * 7])
                continue
            speedup = ratio(result, baseline[workload], "points_per_second") if baseline else ""
            rows.append(
                [
                    workload,
                    tree,
                    run["n"],
                    run["seconds"],
                    run["cpu_seconds"],
                    run["points_per_second"],
                    run["first_500_seconds"],
                    run["second_half_points_per_second"],
                    run["annealing_steps_per_post"],
                    run["log_evidence"],
                    speedup if tree == "this" else "",
                ]
            )
    print(table(header, rows))
    linear = results.get("linear", {})
    if "early_window" in linear:
        windows = [["this", linear["early_points_per_second"], linear["late_points_per_second"]]]
        if baseline and "early_window" in baseline.get("linear", {}):
            old = baseline["linear"]
            windows.append(
                ["baseline", old["early_points_per_second"], old["late_points_per_second"]]
            )
        early, late = linear["early_window"], linear["late_window"]
        print(f"\nlinear rate over {early[0]:,}..{early[1]:,} and {late[0]:,}..{late[1]:,}")
        print(table(["tree", "early points/s", "late points/s"], windows))
    sizes = [[w, *size.values()] for w, r in results.items() for size in r.get("sizes", [])]
    if sizes:
        print("\nMemory: state stays O(particles × params), history grows O(N × columns)")
        print(table(["workload", "n", "state bytes", "history bytes", "peak RSS MiB"], sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linear-n", type=float, default=1e6)
    parser.add_argument("--logistic-n", type=float, default=1e5)
    parser.add_argument("--mixture-n", type=float, default=1e4)
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--post", type=int, default=500, help="rows per POST (default: 500)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="torch device of the estimator")
    parser.add_argument("--baseline", type=Path, default=None, help="source tree to compare to")
    parser.add_argument("--quick", action="store_true", help="linear 1e5, logistic 2e4, mix 2e3")
    parser.add_argument("--output", default=None, help="JSON path (default: results/...)")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.child:
        print(CHILD_RESULT + json.dumps(run_workload(args.child, args), default=float))
        return
    if args.quick:
        args.linear_n, args.logistic_n, args.mixture_n = 1e5, 2e4, 2e3
        # A smoke run never replaces the committed figures (results/quick/ is not tracked).
        args.output = args.output or str(Path(__file__).parent / "results/quick/throughput.json")
    results: dict[str, dict[str, Any]] = {}
    baseline: dict[str, dict[str, Any]] | None = {} if args.baseline else None
    for workload in args.workloads:
        if baseline is not None:
            baseline[workload] = measured_in_child(workload, args, args.baseline.resolve())
        results[workload] = measured_in_child(workload, args, ROOT)

    nan = float("nan")
    linear, logistic = results.get("linear", {}), results.get("logistic", {})
    sustained = min(linear.get("points_per_second", nan), linear.get("late_points_per_second", nan))
    measured = {
        "linear_points_per_second": (sustained, LINEAR_TARGET),
        "late_over_early": (linear.get("late_over_early", nan), RATIO_TARGET),
        "logistic_points_per_second": (logistic.get("points_per_second", nan), LOGISTIC_TARGET),
    }
    # NaN (a failed or skipped workload) compares False: FAIL.
    targets = {
        name: {"value": value, "target": target, "pass": bool(value >= target)}
        for name, (value, target) in measured.items()
    }
    print(
        f"\nSG-AIS, {args.particles} particles, {args.post}-row POSTs, "
        f"{args.threads} torch thread(s), device {device_name(args.device)}"
    )
    if baseline is not None:
        print(f"baseline = {args.baseline} (run in the same script, interleaved per workload)")
    print()
    report(results, baseline)
    labels = {
        "linear_points_per_second": "linear points/s (min of overall, late)",
        "late_over_early": "late / early rate",
        "logistic_points_per_second": "logistic points/s (from row 1)",
    }
    print()
    print(
        table(
            ["target", "measured", "required", "verdict"],
            [
                [labels[name], t["value"], f"≥ {t['target']:,g}", verdict(t["pass"])]
                for name, t in targets.items()
            ],
        )
    )
    if args.quick:
        print("(quick run: the late window is 9e4..1e5, not the issue's 9e5..1e6)")
    payload = {
        "benchmark": "throughput",
        "settings": {
            "particles": args.particles,
            "post_rows": args.post,
            "seed": args.seed,
            "quick": args.quick,
            "estimator": "sgais (defaults)",
            "device": args.device,
            "device_name": device_name(args.device),
            "baseline": None if args.baseline is None else str(args.baseline),
        },
        "environment": environment(args.threads),
        **results,
        "baseline": baseline,
        "targets": targets,
    }
    print(f"\nwrote {write_json('throughput', payload, args.output)}")


if __name__ == "__main__":
    main()
