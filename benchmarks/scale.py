"""Scale-out benchmark: many comparisons, several workers, Redis Cluster against one node.

1. Throughput: 16 comparisons × 2 linear-regression models (``exact`` estimator by default, so
   the figure is the service's own cost per chunk: Redis round trips, scripts, decoding, the
   conjugate update) are queued through the HTTP API, then 1, 2 and 4 ``modelcompare worker``
   processes drain them concurrently; aggregate rows/s = rows applied / wall time from the
   first commit (the workers' start-up, mostly importing torch, is left out) to the last. Run
   on a 3-master Redis Cluster (no replicas, to leave the
   CPU to the workers) and on a single Redis node. Exactly-once is checked at the end of every
   run: each comparison applied every chunk once (sequence, n_observations, one block and one
   trace point per chunk, nothing pending) and its log evidence equals the closed-form evidence
   of all its rows.
2. Memory: Redis bytes (``MEMORY USAGE ... SAMPLES 0`` over a comparison's keys) per row and per
   chunk, from comparisons fed the same number of chunks of two sizes (with Idempotency-Keys):
   bytes = per_chunk × chunks + per_row × rows + fixed.

Prints the figures and writes benchmarks/results/scale.json (``--memory-only``:
scale_memory.json). ``--quick``: fewer rows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
import torch
from _common import environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "service"))
from redis_cluster import LocalCluster, free_node_ports  # noqa: E402

from modelcompare.models import LinearRegression  # noqa: E402
from modelcompare.service.store.connection import Connection, SyncClient  # noqa: E402
from modelcompare.service.store.keys import GROUP, Keys  # noqa: E402

MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
]
COLUMNS = {"right": [0, 1, 2], "too_few": [0, 1]}


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    return x, x @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(size=rows)


def exact_log_evidence(name: str, x: np.ndarray, y: np.ndarray) -> float:
    model = LinearRegression(**MODELS[0 if name == "right" else 1]["config"])
    return float(model.batch_log_evidence(torch.tensor(x[:, COLUMNS[name]]), torch.tensor(y)))


def single_node(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_node_ports(1)[0]
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 30
    while True:
        try:
            if redis.Redis.from_url(url).ping():
                return process, url
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def environment_for(url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "MODELCOMPARE_REDIS_URL": url, "MODELCOMPARE_KEY_PREFIX": prefix,
            "MODELCOMPARE_TORCH_THREADS": "1", "MODELCOMPARE_POLL_INTERVAL": "0.05"}


def start_api(url: str, prefix: str, root: Path = ROOT) -> tuple[subprocess.Popen[bytes], str]:
    port = free_node_ports(1)[0]
    env = {**environment_for(url, prefix), "MODELCOMPARE_EMBEDDED_WORKER": "false"}
    process = subprocess.Popen([sys.executable, "-m", "modelcompare", "--log-level", "warning",
                                "serve", "--port", str(port)], cwd=root, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the API did not start")
        time.sleep(0.2)


def queue_comparisons(api: str, count: int, rows: int, chunk: int,
                      idempotent: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``count`` comparisons with ``rows`` rows each queued in ``chunk``-row chunks."""
    queued = {}
    with httpx.Client(base_url=api, timeout=60) as client:
        for index in range(count):
            body = {"name": f"scale-{index}", "models": MODELS, "x_dim": 3,
                    "estimator": {"method": "exact"}}
            cid = client.post("/v1/comparisons", json=body).json()["id"]
            x, y = data(rows, seed=index)
            for start in range(0, rows, chunk):
                headers = {"Idempotency-Key": uuid.uuid4().hex} if idempotent else {}
                response = client.post(f"/v1/comparisons/{cid}/chunks", headers=headers, json={
                    "x": x[start:start + chunk].tolist(), "y": y[start:start + chunk].tolist()})
                response.raise_for_status()
            queued[cid] = (x, y)
    return queued


def applied(store: SyncClient, prefix: str, cids: list[str]) -> int:
    pipe = store.pipeline(transaction=False)
    for cid in cids:
        pipe.hget(Keys(prefix, cid).meta, "sequence")
    return sum(int(s) for s in pipe.execute())


def exactly_once(store: SyncClient, api: str, prefix: str,
                 queued: dict[str, tuple[np.ndarray, np.ndarray]], chunks: int) -> bool:
    ok = True
    with httpx.Client(base_url=api, timeout=60) as client:
        for cid, (x, y) in queued.items():
            keys = Keys(prefix, cid)
            evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
            trace = client.get(f"/v1/comparisons/{cid}/history").json()["points"]
            models = {m["name"]: m for m in evidence["models"]}
            ok &= evidence["sequence"] == chunks and evidence["n_observations"] == len(y)
            ok &= [p["sequence"] for p in trace] == list(range(1, chunks + 1))
            ok &= store.llen(keys.blocks) == chunks
            ok &= store.xpending(keys.stream, GROUP)["pending"] == 0
            for name in COLUMNS:
                want = exact_log_evidence(name, x, y)
                ok &= abs(models[name]["log_evidence"] - want) <= 1e-8 + 1e-10 * abs(want)
    return bool(ok)


def throughput(url: str, workers: int, comparisons: int, rows: int, chunk: int) -> dict[str, Any]:
    prefix = f"scale-{uuid.uuid4().hex[:8]}"
    api_process, api = start_api(url, prefix)
    store = Connection.detect(url).sync_client()
    try:
        queued = queue_comparisons(api, comparisons, rows, chunk)
        chunks = -(-rows // chunk)
        processes = [subprocess.Popen([sys.executable, "-m", "modelcompare", "--log-level",
                                       "warning", "worker"], cwd=ROOT,
                                      env=environment_for(url, prefix))
                     for _ in range(workers)]
        try:
            total = comparisons * chunks
            while (first := applied(store, prefix, list(queued))) == 0:
                time.sleep(0.005)
            started = time.perf_counter()
            while applied(store, prefix, list(queued)) < total:
                time.sleep(0.02)
            seconds = time.perf_counter() - started
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
        ok = exactly_once(store, api, prefix, queued, chunks)
    finally:
        api_process.terminate()
        api_process.wait(timeout=30)
    timed_rows = (comparisons * chunks - first) * chunk
    return {"workers": workers, "rows": comparisons * rows, "chunks": comparisons * chunks,
            "seconds": seconds, "rows_per_second": timed_rows / seconds,
            "exactly_once": ok}


def comparison_bytes(store: SyncClient, prefix: str, cid: str) -> int:
    return sum(int(store.memory_usage(key, samples=0) or 0)
               for key in store.scan_iter(match=Keys(prefix, cid).pattern, count=1000))


def memory(url: str, chunks: int, sizes: tuple[int, int], root: Path = ROOT) -> dict[str, Any]:
    """Bytes per row and per chunk (with an idempotency record per chunk), after the workers
    applied every chunk; the service run from the checkout at ``root``."""
    prefix = f"mem-{uuid.uuid4().hex[:8]}"
    api_process, api = start_api(url, prefix, root)
    store = Connection.detect(url).sync_client()
    worker = subprocess.Popen([sys.executable, "-m", "modelcompare", "--log-level", "warning",
                               "worker"], cwd=root, env=environment_for(url, prefix))
    try:
        empty = next(iter(queue_comparisons(api, 1, 0, 1)))
        totals = []
        for size in sizes:
            cid = next(iter(queue_comparisons(api, 1, chunks * size, size, idempotent=True)))
            while applied(store, prefix, [cid]) < chunks:
                time.sleep(0.05)
            totals.append(comparison_bytes(store, prefix, cid))
        fixed = comparison_bytes(store, prefix, empty)
    finally:
        worker.terminate()
        api_process.terminate()
        worker.wait(timeout=30)
        api_process.wait(timeout=30)
    (small, large), (small_rows, large_rows) = totals, sizes
    per_row = (large - small) / (chunks * (large_rows - small_rows))
    per_chunk = (small - fixed) / chunks - per_row * small_rows
    return {"chunks": chunks, "chunk_rows": list(sizes), "bytes": totals, "fixed_bytes": fixed,
            "bytes_per_row": per_row, "bytes_per_chunk": per_chunk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--comparisons", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--baseline", type=Path, help="a checkout of other code: "
                        "its bytes per row and per chunk are measured too")
    parser.add_argument("--memory-only", action="store_true", help="skip the throughput runs")
    parser.add_argument("--rows", type=int, help="rows per comparison (default 3000; "
                        "--quick: 1000), in 100-row chunks")
    args = parser.parse_args()
    rows, chunk = args.rows or (1_000 if args.quick else 3_000), 100
    runs: dict[str, list[dict[str, Any]]] = {}
    memory_figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        cluster = LocalCluster(Path(scratch) / "cluster", masters=3, replicas=0)
        node, node_url = single_node(Path(scratch))
        try:
            for backend, url in () if args.memory_only else (("cluster", cluster.url),
                                                                  ("single", node_url)):
                runs[backend] = [throughput(url, w, args.comparisons, rows, chunk)
                                 for w in args.workers]
                print(f"\n{backend}: {args.comparisons} comparisons x {rows} rows "
                      f"({chunk}-row chunks), exact estimator")
                print(table(["workers", "rows/s", "seconds", "exactly once"],
                            [[r["workers"], round(r["rows_per_second"]), round(r["seconds"], 2),
                              verdict(r["exactly_once"])] for r in runs[backend]]))
            roots = {"after": ROOT, **({"before": args.baseline} if args.baseline else {})}
            for label, root in roots.items():
                memory_figures[label] = memory(node_url, 50 if args.quick else 200, (10, 100),
                                               root)
                print(f"\nRedis bytes ({label}): "
                      f"{memory_figures[label]['bytes_per_row']:.1f} per row, "
                      f"{memory_figures[label]['bytes_per_chunk']:.0f} per chunk")
        finally:
            cluster.stop()
            node.terminate()
            node.wait(timeout=30)
    ratios = {str(r["workers"]): r["rows_per_second"] / c["rows_per_second"]
              for r, c in zip(runs.get("cluster", []), runs.get("single", []), strict=True)}
    print("cluster / single node rows/s by workers:",
          {k: round(v, 2) for k, v in ratios.items()})
    write_json("scale_memory" if args.memory_only else "scale", {
        "environment": environment(1), "comparisons": args.comparisons,
        "rows_per_comparison": rows, "chunk_rows": chunk, "runs": runs,
        "cluster_over_single": ratios, "memory": memory_figures})


if __name__ == "__main__":
    main()
