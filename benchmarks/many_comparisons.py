"""The service with 10,000 comparisons: list pages, an idle worker, a healthy chunk.

Starts real processes, twice (fault_processes.Deployment: redis-server with AOF, ``modelcompare
serve`` without an in-process worker, one ``modelcompare worker``), then:

1. creates ``--comparisons`` idle comparisons through the API (concurrent requests);
2. list latency: ~50 pages of ``GET /v1/comparisons?limit=50`` following ``next_cursor``
   (p50/p99, bytes per reply); on code without pagination the whole list, fewer times;
3. the idle worker's CPU (% of one core, psutil ``cpu_times`` over ``--idle-seconds``), and
   Redis's beside it; this checkout's safety sweep and housekeeping pass, timed once each;
4. a healthy comparison's chunk latency (2 linear regressions, SG-AIS, 64 particles; 20-row
   chunks with ``?wait=true``; p50/p99) beside the idle ones, and in a second deployment of
   the same code where it is alone, the chunks sent to the two in turn.

``--baseline REF`` runs the same against another commit (a ``git archive`` checkout, as in
benchmarks/recovery.py) in the same run. Redis runs with ``appendfsync everysec`` here (creating
10,000 comparisons under ``always`` measures the disk). Writes
benchmarks/results/many_comparisons.json. ``--quick``: 1,000 comparisons, a 10 s window.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from _common import QUICK, checkout, environment, table, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

HEALTHY = {
    "name": "healthy",
    "seed": 0,
    "models": [
        {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
        {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
    ],
    "estimator": {"method": "sgais", "particles": 64},
    "x_dim": 4,
}
IDLE = {
    "name": "idle",
    "seed": 0,
    "models": [{"name": "m", "family": "linear_regression", "config": {"dim": 2}}],
    "estimator": {"method": "exact"},
    "x_dim": 2,
}


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "n": 0}
    array = np.asarray(values)
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99)),
            "n": len(values)}


def chunk_latencies(client: httpx.Client, cid: str, count: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    seconds = []
    for _ in range(count):
        x = rng.normal(size=(20, 4))
        y = x[:, :3] @ np.array([1.0, -0.5, 0.25]) + rng.normal(size=20)
        started = time.perf_counter()
        reply = client.post(f"/v1/comparisons/{cid}/chunks", params={"wait": "true"},
                            json={"x": x.tolist(), "y": y.tolist()})
        seconds.append(time.perf_counter() - started)
        assert reply.status_code == 200, reply.text
    return seconds


def create_idle(url: str, count: int, threads: int) -> float:
    started = time.perf_counter()

    def make(start: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            for i in range(start, count, threads):
                reply = client.post("/v1/comparisons", json={**IDLE, "name": f"idle-{i}"})
                assert reply.status_code == 201, reply.text

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(make, range(threads)))
    return time.perf_counter() - started


def list_latencies(client: httpx.Client, pages: int) -> tuple[list[float], list[int], bool]:
    """Follow the cursor for ``pages`` pages (from the top again at the end); on code
    without pagination each request returns everything."""
    seconds, sizes, paginated = [], [], True
    cursor = None
    for _ in range(pages):
        params: dict[str, Any] = {"limit": 50}
        if cursor is not None:
            params["cursor"] = cursor
        started = time.perf_counter()
        reply = client.get("/v1/comparisons", params=params)
        seconds.append(time.perf_counter() - started)
        assert reply.status_code == 200, reply.text
        sizes.append(len(reply.content))
        body = reply.json()
        paginated = "next_cursor" in body
        cursor = body.get("next_cursor")
    return seconds, sizes, paginated


def cpu_share(process: psutil.Process, seconds: float) -> float:
    before, started = process.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after = process.cpu_times()
    busy = after.user + after.system - before.user - before.system
    return busy / (time.monotonic() - started)


def periodic_costs(deployment: Deployment) -> dict[str, float]:
    """CPU of a worker's two periodic passes over every comparison, run here (this checkout's
    code): the work sweep (every ``work_sweep_interval``) and housekeeping (every
    ``housekeeping_interval``), and what they cost a worker on average at the defaults."""
    import redis

    from modelcompare.service.core.config import Settings
    from modelcompare.service.housekeeping import Housekeeping
    from modelcompare.service.store.queue import Queue
    from modelcompare.service.store.work import WorkFinder

    defaults = Settings()
    client = redis.Redis.from_url(deployment.redis.url)
    try:
        finder = WorkFinder(client, deployment.prefix)
        started = time.process_time()
        finder.sweep()
        sweep = time.process_time() - started
        chores = Housekeeping(Queue(client, deployment.prefix, "bench"), finder, 0.0,
                              defaults.consumer_idle_max)
        chores.next_run = 0.0
        started = time.process_time()
        chores.run_if_due()
        housekeeping = time.process_time() - started
    finally:
        client.close()
    return {"sweep_cpu_seconds": sweep, "housekeeping_cpu_seconds": housekeeping,
            "amortized_core_share": (sweep / defaults.work_sweep_interval
                                     + housekeeping / defaults.housekeeping_interval)}


def run(root: Path, workdir: Path, comparisons: int, idle_seconds: float, chunks: int,
        pages: int, baseline_pages: int, threads: int) -> dict[str, Any]:
    """Two deployments of the same code side by side: one holds only the healthy comparison,
    the other the healthy one and ``comparisons`` idle ones; chunks go to the two in turn, so
    the load of the machine weighs on both alike."""
    empty = Deployment(workdir / "empty", workers=1, appendfsync="everysec", root=root)
    full = Deployment(workdir / "full", workers=1, appendfsync="everysec", root=root)
    try:
        for deployment in (empty, full):
            deployment.start()
        with (httpx.Client(base_url=empty.api.url, timeout=600) as alone_client,
              httpx.Client(base_url=full.api.url, timeout=600) as client):
            healthy = {}
            for name, api in (("alone", alone_client), ("crowded", client)):
                healthy[name] = api.post("/v1/comparisons", json=HEALTHY).json()["id"]
                chunk_latencies(api, healthy[name], 3, seed=99)  # warm up
            created = create_idle(full.api.url, comparisons, threads)
            print(f"  created {comparisons} comparisons in {created:.1f} s "
                  f"({comparisons / created:.0f}/s)")
            first = client.get("/v1/comparisons", params={"limit": 50})
            paginated = "next_cursor" in first.json()
            seconds, sizes, paginated = list_latencies(
                client, pages if paginated else baseline_pages)
            print(f"  list: p50 {statistics.median(seconds) * 1000:.1f} ms, "
                  f"{statistics.median(sizes) / 1e6:.3f} MB a reply (paginated: {paginated})")
            worker = full.workers[0].process
            assert worker is not None and full.redis.process is not None
            time.sleep(2.0)
            redis_process = psutil.Process(full.redis.process.pid)
            redis_process.cpu_percent()
            idle = cpu_share(psutil.Process(worker.pid), idle_seconds)
            redis_share = redis_process.cpu_percent() / 100
            print(f"  idle worker: {idle * 100:.2f}% of a core over {idle_seconds:.0f} s "
                  f"(redis-server {redis_share * 100:.2f}%)")
            chores = periodic_costs(full) if root == ROOT else {}
            if chores:
                print(f"  one safety sweep: {chores['sweep_cpu_seconds']:.3f} s CPU; one "
                      f"housekeeping pass: {chores['housekeeping_cpu_seconds']:.3f} s CPU; "
                      f"{chores['amortized_core_share'] * 100:.2f}% of a core at the defaults")
            alone: list[float] = []
            crowded: list[float] = []
            for i in range(chunks):  # in turn
                alone += chunk_latencies(alone_client, healthy["alone"], 1, seed=i)
                crowded += chunk_latencies(client, healthy["crowded"], 1, seed=i)
            print(f"  chunk p50: alone {statistics.median(alone):.3f} s, beside {comparisons} "
                  f"idle {statistics.median(crowded):.3f} s")
    finally:
        full.stop()
        empty.stop()
    return {
        "comparisons": comparisons,
        "create_seconds": created,
        "paginated": paginated,
        "list_seconds": seconds,
        "list_bytes": sizes,
        "list": percentiles(seconds),
        "idle_worker_core_share": idle,
        "idle_redis_core_share": redis_share,
        "periodic": chores,
        "chunk_alone": percentiles(alone),
        "chunk_crowded": percentiles(crowded),
        "chunk_alone_seconds": alone,
        "chunk_crowded_seconds": crowded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=1000 if QUICK else 10_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0 if QUICK else 30.0)
    parser.add_argument("--chunks", type=int, default=20 if QUICK else 50)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--baseline-pages", type=int, default=5,
                        help="whole-list requests on code without pagination (seconds each)")
    parser.add_argument("--threads", type=int, default=8, help="concurrent creates")
    parser.add_argument("--baseline", default=None, help="git ref of the code to compare with")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="the baseline's code already extracted there (else git archive)")
    parser.add_argument("--quick", action="store_true", help="a smoke run into results/quick/")
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = (args.comparisons, args.idle_seconds, args.chunks, args.pages,
                    args.baseline_pages, args.threads)
        print("this checkout:")
        runs["current"] = run(ROOT, Path(tmp) / "current", *settings)
        if args.baseline:
            print(f"baseline {args.baseline}:")
            root = args.baseline_root or checkout(args.baseline, Path(tmp) / "baseline-code")
            runs["baseline"] = run(root, Path(tmp) / "baseline", *settings)
    rows = []
    for name, result in runs.items():
        rows.append([
            name, result["comparisons"],
            result["list"]["p50"] * 1000, result["list"]["p99"] * 1000,
            statistics.median(result["list_bytes"]) / 1000,
            result["idle_worker_core_share"] * 100, result["idle_redis_core_share"] * 100,
            result["chunk_alone"]["p50"], result["chunk_alone"]["p99"],
            result["chunk_crowded"]["p50"], result["chunk_crowded"]["p99"],
        ])
    print(table(["code", "comparisons", "list p50 ms", "list p99 ms", "reply kB",
                 "idle worker % core", "redis % core", "chunk alone p50 s", "p99 s",
                 "chunk crowded p50 s", "p99 s"], rows))
    current = runs["current"]
    targets = {
        "list_page_p50_le_100ms": current["list"]["p50"] <= 0.1,
        # the window measured (it may hold a sweep), and the long-run average of the periodic
        # passes at the default intervals
        "idle_worker_le_2pct_core": current["idle_worker_core_share"] <= 0.02,
        "periodic_passes_le_2pct_core": (current["periodic"].get("amortized_core_share", 0.0)
                                         <= 0.02),
        "chunk_p50_crowded_le_1_25x_alone": (current["chunk_crowded"]["p50"]
                                             <= 1.25 * current["chunk_alone"]["p50"]),
    }
    for key, ok in targets.items():
        print(f"{key}: {'PASS' if ok else 'FAIL'}")
    arguments = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = write_json("many_comparisons", {"environment": environment(1),
                                           "arguments": arguments, "runs": runs,
                                           "targets": targets})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
