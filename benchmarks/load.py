"""Load run on loopback: concurrent clients post chunks, read evidence and follow websockets.

Starts redis-server (AOF, ``appendfsync always``), the API (``modelcompare serve``) and
``--workers`` worker processes, then runs ``--clients`` asyncio clients for ``--duration``
seconds. Each client owns a websocket on its comparison and loops: POST a chunk (with an
Idempotency-Key), GET the evidence, pause ``--think`` seconds. Afterwards the workers drain the
queues and every acknowledged chunk is looked up in the stored history: lost (acknowledged, never
applied) and duplicated (applied twice) chunks are counted, as are websocket version regressions.

Prints p50/p99 latency per request kind, throughput and errors; writes
benchmarks/results/load.json. ``--quick`` runs 10 clients for 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import redis
import websockets
from _common import write_json

ROOT = Path(__file__).resolve().parents[1]
# The root (a checkout run without an install finds its code there) and the process harness
# shared with the fault tests.
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Child, Deployment  # noqa: E402

from modelcompare.service.store.codec import block_digest, encode_block  # noqa: E402
from modelcompare.service.store.keys import Keys  # noqa: E402

MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "wrong_noise", "family": "linear_regression", "config": {"dim": 3, "noise_std": 3.0}},
]


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)  # transport errors a retry fixed
    acknowledged: dict[str, dict[str, int]] = field(default_factory=dict)  # cid -> digest -> seq
    ws_messages: int = 0
    ws_regressions: int = 0  # a websocket message whose version did not rise

    def timed(self, kind: str, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)


def chunk(rng: np.random.Generator, rows: int) -> dict[str, Any]:
    x = rng.normal(size=(rows, 4))
    y = x[:, :3] @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(size=rows)
    return {"x": x.tolist(), "y": y.tolist()}


async def follow(url: str, cid: str, tally: Tally, stop: asyncio.Event) -> None:
    """One websocket: count messages and check that versions only rise."""
    try:
        async with websockets.connect(f"{url}/v1/comparisons/{cid}/ws", max_size=None) as ws:
            version = -1
            while not stop.is_set():
                try:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                except TimeoutError:
                    continue
                tally.ws_messages += 1
                tally.ws_regressions += message["evidence"]["version"] <= version
                version = message["evidence"]["version"]
    except (OSError, websockets.WebSocketException) as exc:
        tally.errors[f"websocket {type(exc).__name__}"] += 1


async def post_chunk(http: httpx.AsyncClient, cid: str, body: dict[str, Any], key: str,
                     tally: Tally, attempts: int = 3) -> httpx.Response:
    """POST with retries under the same Idempotency-Key, as a client should: a connection the
    server closed as idle just as it was reused (keep-alive race) is not an error of the call."""
    url, headers = f"/v1/comparisons/{cid}/chunks", {"Idempotency-Key": key}
    for _ in range(attempts - 1):
        try:
            return await http.post(url, json=body, headers=headers)
        except httpx.TransportError as exc:
            tally.retried[type(exc).__name__] += 1
    return await http.post(url, json=body, headers=headers)


async def client_loop(index: int, url: str, cid: str, args: argparse.Namespace, tally: Tally,
                      http: httpx.AsyncClient, deadline: float) -> None:
    rng = np.random.default_rng(index)
    stop = asyncio.Event()
    watcher = asyncio.create_task(follow(url.replace("http://", "ws://"), cid, tally, stop))
    sent = 0
    while time.monotonic() < deadline:
        body = chunk(rng, args.rows)
        started = time.perf_counter()
        try:
            response = await post_chunk(http, cid, body, f"client{index}-{sent}", tally)
        except httpx.TransportError as exc:
            tally.errors[f"POST chunk {type(exc).__name__}"] += 1
        else:
            tally.timed("post_chunk", time.perf_counter() - started)
            if response.status_code == 202:
                digest = block_digest(encode_block(np.array(body["x"]), np.array(body["y"])))
                tally.acknowledged[cid][digest] = response.json()["sequence"]
            else:
                tally.errors[f"POST chunk {response.status_code}"] += 1
        sent += 1
        started = time.perf_counter()
        try:
            response = await http.get(f"/v1/comparisons/{cid}/evidence")
        except httpx.TransportError as exc:
            tally.errors[f"GET evidence {type(exc).__name__}"] += 1
        else:
            tally.timed("get_evidence", time.perf_counter() - started)
            if response.status_code != 200:
                tally.errors[f"GET evidence {response.status_code}"] += 1
        await asyncio.sleep(args.think)
    stop.set()
    await watcher


async def run_clients(url: str, cids: list[str], args: argparse.Namespace) -> Tally:
    tally = Tally(acknowledged={cid: {} for cid in cids})
    # Drop idle connections before uvicorn does (its keep-alive timeout is 5 s): reusing one the
    # server is closing fails with ReadError, a race of the client, not of the service.
    limits = httpx.Limits(max_connections=args.clients + 10, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        deadline = time.monotonic() + args.duration
        await asyncio.gather(*(client_loop(i, url, cids[i % len(cids)], args, tally, http,
                                           deadline) for i in range(args.clients)))
    return tally


def audit(store: redis.Redis, prefix: str, tally: Tally, timeout: float) -> dict[str, Any]:
    """Wait for the workers to drain, then match acknowledged chunks against applied blocks."""
    lost = duplicated = misplaced = applied = 0
    drain_started = time.monotonic()
    for cid, acknowledged in tally.acknowledged.items():
        keys = Keys(prefix, cid)
        while True:
            sequence, ingested = (int(v) for v in store.hmget(keys.meta, "sequence", "next_seq"))
            if sequence >= ingested or time.monotonic() - drain_started > timeout:
                break
            time.sleep(0.2)
        blocks = store.lrange(keys.blocks, 0, -1)
        applied += len(blocks)
        positions: dict[str, list[int]] = {}
        for position, block in enumerate(blocks, start=1):
            positions.setdefault(block_digest(block), []).append(position)
        duplicated += sum(len(p) - 1 for p in positions.values())
        for digest, sequence in acknowledged.items():
            found = positions.get(digest, [])
            lost += not found
            misplaced += bool(found) and found[0] != sequence
    return {"acknowledged": sum(len(a) for a in tally.acknowledged.values()), "applied": applied,
            "lost": lost, "duplicated": duplicated, "misplaced": misplaced,
            "drain_seconds": time.monotonic() - drain_started}


def cpu_seconds(children: list[Child]) -> float:
    """User + system CPU seconds the processes (and their threads) have used so far."""
    return sum(sum(psutil.Process(c.process.pid).cpu_times()[:2]) for c in children
               if c.process is not None)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--comparisons", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20, help="rows per chunk")
    parser.add_argument("--think", type=float, default=0.2, help="pause per client loop (s)")
    parser.add_argument("--method", default="exact", help="estimator of every comparison")
    parser.add_argument("--quick", action="store_true", help="10 clients for 10 s")
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON path (default results/load.json)")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.duration = 10, 10.0

    with tempfile.TemporaryDirectory() as tmp:
        deployment = Deployment(Path(tmp), workers=args.workers, poll_interval=0.05)
        deployment.start()
        try:
            with httpx.Client(base_url=deployment.api.url, timeout=30) as client:
                cids = [client.post("/v1/comparisons", json={
                    "name": f"load-{i}", "seed": i, "models": MODELS, "x_dim": 4,
                    "estimator": {"method": args.method}}).json()["id"]
                    for i in range(args.comparisons)]
            processes = {"api": [deployment.api], "workers": deployment.workers,
                         "redis": [deployment.redis]}
            before = {name: cpu_seconds(children) for name, children in processes.items()}
            client_before = sum(psutil.Process().cpu_times()[:2])
            load_before = os.getloadavg()[0]
            started = time.monotonic()
            tally = asyncio.run(run_clients(deployment.api.url, cids, args))
            elapsed = time.monotonic() - started
            cpu = {name: cpu_seconds(children) - before[name]
                   for name, children in processes.items()}
            cpu["load_generator"] = sum(psutil.Process().cpu_times()[:2]) - client_before
            store = redis.Redis.from_url(deployment.redis.url)
            integrity = audit(store, deployment.prefix, tally, timeout=300)
        finally:
            deployment.stop()

    requests = sum(len(v) for v in tally.latencies.values())
    results = {
        "setup": {k: v for k, v in vars(args).items() if k != "output"},
        "elapsed_s": elapsed,
        "requests_per_s": requests / elapsed,
        "chunks_acknowledged_per_s": integrity["acknowledged"] / elapsed,
        "latency_ms": {kind: {"count": len(v), "p50": 1e3 * percentile(v, 50),
                              "p99": 1e3 * percentile(v, 99), "max": 1e3 * max(v)}
                       for kind, v in tally.latencies.items()},
        "errors": sum(tally.errors.values()),
        "error_kinds": dict(tally.errors),
        "posts_retried": dict(tally.retried),
        "cpu_seconds_during_load": cpu,  # the 2 cores are shared by all of them (and others)
        "cpus": os.cpu_count(),
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "websocket_messages": tally.ws_messages,
        "websocket_version_regressions": tally.ws_regressions,
        **integrity,
    }
    args.output = write_json("load", results, args.output)
    print(f"{args.clients} clients, {args.comparisons} comparisons ({args.method}), "
          f"{args.workers} workers, {elapsed:.1f} s")
    for kind, figures in results["latency_ms"].items():
        print(f"  {kind:13s} n={figures['count']:6d}  p50 {figures['p50']:7.1f} ms  "
              f"p99 {figures['p99']:7.1f} ms  max {figures['max']:7.1f} ms")
    print(f"  throughput: {results['requests_per_s']:.0f} requests/s, "
          f"{results['chunks_acknowledged_per_s']:.0f} chunks/s acknowledged")
    print("  CPU seconds during the load: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
          + f" ({os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before, "
          f"{results['load_average_1min']['after']:.1f} after)")
    print(f"  errors: {results['errors']} {dict(tally.errors)}; POSTs retried with the same "
          f"key {dict(tally.retried)}; websocket messages "
          f"{tally.ws_messages}, version regressions {tally.ws_regressions}")
    print(f"  chunks: acknowledged {integrity['acknowledged']}, applied {integrity['applied']}, "
          f"lost {integrity['lost']}, duplicated {integrity['duplicated']}, misplaced "
          f"{integrity['misplaced']} (queues drained in {integrity['drain_seconds']:.1f} s)")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
