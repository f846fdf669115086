"""Recovery of a comparison when the worker holding its lease dies, or Redis does.

Starts redis-server on its own port (AOF, ``appendfsync always``), the API and two
``modelcompare worker`` processes, and feeds one comparison (2 SG-AIS models) a steady backlog
of chunks. Two kinds of trial:

- worker: SIGKILL the worker holding the comparison's lease, 0.1 s into a batch; time from the
  kill to the next commit (the killed worker is started again between trials);
- redis: SIGKILL redis-server while the lease is held and start it again from its AOF; time
  from Redis answering again to the next commit.

Afterwards every chunk sent must have been applied once, in order, to the states of a clean
in-process run (nothing lost, nothing applied twice). The same trials run against a baseline
checkout (``--baseline REF``) in the same run, so the figures come with ratios. Prints
median/max; writes benchmarks/results/recovery.json.
``--quick``: 3 + 1 trials, no baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import QUICK, checkout, environment, set_threads, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402
from recovery_trials import Scenario  # noqa: E402


def run_trials(root: Path, workdir: Path, worker_trials: int, redis_trials: int) -> dict[str, Any]:
    deployment = Deployment(workdir, workers=2, root=root)
    deployment.start()
    try:
        scenario = Scenario(deployment)
        kills = []
        for trial in range(worker_trials):
            kills.append(scenario.kill_holder(timeout=120))
            print(f"  worker trial {trial + 1}: next commit {kills[-1]:.2f} s after the kill")
        restarts, survived = [], []
        for trial in range(redis_trials):
            seconds, kept = scenario.restart_redis(timeout=120)
            restarts.append(seconds)
            survived.append(kept)
            print(f"  redis trial {trial + 1}: next commit {seconds:.2f} s after Redis was back"
                  f" (lease kept in the AOF: {kept})")
        audit = scenario.audit()
    finally:
        deployment.stop()
    return {"worker_kill_seconds": kills, "redis_restart_seconds": restarts,
            "lease_survived_restart": survived, "audit": audit}


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "max": None}
    return {"median": statistics.median(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3 if QUICK else 10)
    parser.add_argument("--redis-trials", type=int, default=1 if QUICK else 3)
    parser.add_argument("--baseline", default=None,
                        help="git ref of other code to run the same trials on (none under --quick)")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="the baseline's code already extracted there (else git archive)")
    parser.add_argument("--baseline-trials", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run into results/quick/")
    args = parser.parse_args()
    set_threads(1)
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("this checkout:")
        runs["current"] = run_trials(ROOT, Path(tmp) / "current", args.trials, args.redis_trials)
        if args.baseline:
            print(f"baseline {args.baseline}:")
            root = args.baseline_root or checkout(args.baseline, Path(tmp) / "baseline-code")
            runs["baseline"] = run_trials(root, Path(tmp) / "baseline", args.baseline_trials,
                                          args.baseline_trials)
    rows, figures = [], {}
    for name, run in runs.items():
        kill, restart = summary(run["worker_kill_seconds"]), summary(run["redis_restart_seconds"])
        figures[name] = {"worker_kill": kill, "redis_restart": restart}
        audit = run["audit"]
        intact = (audit["applied"] == audit["sent"] and audit["pending"] == 0
                  and audit["in_order_once"] and audit["bit_identical"])
        rows.append([name, len(run["worker_kill_seconds"]), kill["median"], kill["max"],
                     len(run["redis_restart_seconds"]), restart["median"], restart["max"],
                     "yes" if intact else "NO"])
        run["intact"] = intact
    print(table(["code", "kills", "median s", "max s", "redis restarts", "median s", "max s",
                 "all applied once"], rows))
    current = figures["current"]
    targets = {
        "worker_kill_median_le_3s": current["worker_kill"]["median"] <= 3.0,
        "worker_kill_max_le_5s": current["worker_kill"]["max"] <= 5.0,
        "redis_restart_max_le_3s": (current["redis_restart"]["max"] or 0.0) <= 3.0,
        "nothing_lost_or_twice": runs["current"]["intact"],
    }
    ratios = {}
    if "baseline" in figures:
        base = figures["baseline"]
        ratios = {f"{kind}_median_baseline_over_current":
                  base[kind]["median"] / current[kind]["median"]
                  for kind in ("worker_kill", "redis_restart")}
        for key, value in ratios.items():
            print(f"{key}: {value:.1f}x")
    for key, ok in targets.items():
        print(f"{key}: {verdict(ok)}")
    arguments = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = write_json("recovery", {"environment": environment(1), "arguments": arguments,
                                   "runs": runs, "figures": figures, "ratios": ratios,
                                   "targets": targets})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
