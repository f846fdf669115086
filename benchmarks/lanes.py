"""One worker, a costly comparison beside a healthy one: does the healthy one wait?

Starts redis-server on its own port, ``modelcompare serve`` and one ``modelcompare worker``
(benchmarks/load.py's harness) with the default update budget (30 CPU s). A costly comparison
asks for the most work per chunk the bounds allow (SG-AIS, 16 islands of 1,024 particles, 64
HMC moves × 100 leapfrog steps, 20 inputs) and gets ``--costly-chunks`` chunks of 1,000 rows at
once; a healthy comparison (exact linear regression) is fed a 20-row chunk every 0.25 s with
``?wait=true`` for ``--seconds`` seconds, its latency measured from the request to the applied
answer. Afterwards the costly comparison is watched until its first chunk is applied or it
halts (it may not get through its update budget), up to ``--settle`` seconds.

Target: the healthy comparison's p99 ≤ 2 s, and the costly one progresses or ends degraded with
its reason. ``--baseline REF`` runs the same scenario on another checkout (git archive) in the
same run. Writes benchmarks/results/lanes.json; ``--quick``: 20 s, no settle (results/quick/).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import QUICK, checkout, environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

HEALTHY = {"name": "healthy", "x_dim": 1, "estimator": {"method": "exact"},
           "models": [{"name": "line", "family": "linear_regression", "config": {"dim": 1}}]}
COSTLY = {"name": "costly", "x_dim": 20,
          "estimator": {"method": "sgais", "particles": 1024, "islands": 16, "hmc_moves": 64,
                        "leapfrog_steps": 100},
          "models": [{"name": "wide", "family": "linear_regression", "config": {"dim": 20}}]}


def feed_healthy(url: str, cid: str, seconds: float) -> list[tuple[float, int]]:
    """A 20-row chunk every 0.25 s with ``?wait=true``: (latency, status) of each."""
    rng = np.random.default_rng(0)
    latencies: list[tuple[float, int]] = []
    ends = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=120) as client:
        while time.monotonic() < ends:
            x = rng.normal(size=(20, 1))
            body = {"x": x.tolist(), "y": (0.5 * x[:, 0] + rng.normal(size=20)).tolist()}
            started = time.monotonic()
            try:
                status = client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                                     json=body).status_code
            except httpx.HTTPError:
                status = 0
            latencies.append((time.monotonic() - started, status))
            time.sleep(max(0.0, 0.25 - (time.monotonic() - started)))
    return latencies


def costly_outcome(client: httpx.Client, cid: str) -> dict[str, Any]:
    evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
    return {"sequence": evidence["sequence"], "status": evidence["status"],
            "halted_at": evidence.get("halted_at"),
            "status_reason": evidence.get("status_reason")}


def scenario(root: Path, data_dir: Path, seconds: float, costly_chunks: int,
             settle: float) -> dict[str, Any]:
    deployment = Deployment(data_dir, workers=1, appendfsync="everysec", root=root,
                            poll_interval=0.05)
    deployment.start()
    try:
        with httpx.Client(base_url=deployment.api.url, timeout=120) as client:
            healthy = client.post("/v1/comparisons", json=HEALTHY).json()["id"]
            costly = client.post("/v1/comparisons", json=COSTLY).json()["id"]
            rng = np.random.default_rng(1)
            for _ in range(costly_chunks):
                body = {"x": rng.normal(size=(1000, 20)).tolist(),
                        "y": rng.normal(size=1000).tolist()}
                assert client.post(f"/v1/comparisons/{costly}/chunks",
                                   json=body).status_code == 202
            started = time.monotonic()
            latencies: list[tuple[float, int]] = []
            feeder = threading.Thread(target=lambda: latencies.extend(
                feed_healthy(deployment.api.url, healthy, seconds)))
            feeder.start()
            feeder.join()
            during = costly_outcome(client, costly)
            while time.monotonic() - started < seconds + settle:
                outcome = costly_outcome(client, costly)
                if outcome["sequence"] >= 1 or outcome["halted_at"] is not None:
                    break
                time.sleep(1.0)
            outcome = {**costly_outcome(client, costly),
                       "after_s": round(time.monotonic() - started, 1)}
    finally:
        deployment.stop()
    values = [latency for latency, _ in latencies]
    return {"healthy_chunks": len(values),
            "healthy_failed": sum(status != 200 for _, status in latencies),
            "healthy_p50_s": float(np.percentile(values, 50)),
            "healthy_p99_s": float(np.percentile(values, 99)),
            "healthy_max_s": max(values),
            "costly_after_window": during, "costly_outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0 if QUICK else 60.0)
    parser.add_argument("--settle", type=float, default=0.0 if QUICK else 150.0)
    parser.add_argument("--costly-chunks", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="a git ref to run beside this tree")
    parser.add_argument("--quick", action="store_true", help="20 s, no settle")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            print(f"baseline {args.baseline}:", flush=True)
            runs["baseline"] = scenario(checkout(args.baseline, Path(tmp) / "baseline-code"),
                                        Path(tmp) / "baseline", args.seconds,
                                        args.costly_chunks, args.settle)
        print("this tree:", flush=True)
        runs["current"] = scenario(ROOT, Path(tmp) / "current", args.seconds,
                                   args.costly_chunks, args.settle)
    current = runs["current"]
    results = {"setup": {"workers": 1, "update_budget_s": 30.0, "seconds": args.seconds,
                         "costly_chunks": args.costly_chunks, "baseline": args.baseline},
               "environment": environment(1), "runs": runs,
               "latency_target_met": current["healthy_p99_s"] <= 2.0,
               "costly_progressed": (current["costly_outcome"]["sequence"] >= 1
                                     or current["costly_outcome"]["halted_at"] is not None)}
    path = write_json("lanes", results, args.output)
    print(table(["code", "healthy chunks", "failed", "p50 s", "p99 s", "max s",
                 "costly after window", "costly at end"],
                [[name, r["healthy_chunks"], r["healthy_failed"], r["healthy_p50_s"],
                  r["healthy_p99_s"], r["healthy_max_s"],
                  f"seq {r['costly_after_window']['sequence']}, "
                  f"{r['costly_after_window']['status']}",
                  f"seq {r['costly_outcome']['sequence']}, {r['costly_outcome']['status']} "
                  f"({r['costly_outcome']['after_s']} s)"]
                 for name, r in runs.items()]))
    reason = current["costly_outcome"]["status_reason"]
    if reason:
        print(f"costly comparison: {reason}")
    print(f"healthy p99 ≤ 2 s: {verdict(results['latency_target_met'])}; costly progressed or "
          f"ended degraded: {verdict(results['costly_progressed'])}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
