"""Service benchmark: what HTTP + Redis + serialisation add on top of the estimator.

Starts ``modelcompare serve`` (embedded Redis, in-process worker) in a subprocess and prints:
- chunk-to-websocket latency (p50/p99) and the part beyond the estimator's own compute
  (``compute_seconds`` of each update), for a 3-model SG-AIS comparison and 500-row chunks;
- ingest throughput (rows/s, chunks/s) for that comparison, end to end;
- GET /evidence requests per second from one API process;
- service overhead per chunk as the stored history grows (``exact`` estimator, whose compute is
  negligible, so latency is overhead), up to ``--history-rows`` (1e6 by default).

Writes benchmarks/results/service.json. ``--quick`` shrinks everything for a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import websockets
from _common import write_json

ROOT = Path(__file__).resolve().parents[1]
MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "wrong_noise", "family": "linear_regression", "config": {"dim": 3, "noise_std": 3.0}},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MODELCOMPARE_REDIS_URL")}
    command = [sys.executable, "-m", "modelcompare", "--log-level", "warning", "serve", "--port",
               str(port), "--data-dir", data_dir]
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the server did not start")
        time.sleep(0.1)


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4))
    return x, x[:, :3] @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(size=rows)


def create(client: httpx.Client, method: str, **settings: Any) -> str:
    body = {"name": f"bench-{method}", "models": MODELS, "x_dim": 4,
            "estimator": {"method": method, **settings}}
    response = client.post("/v1/comparisons", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


async def latencies(url: str, cid: str, chunks: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(chunk POST -> websocket update, estimator compute) per chunk, one chunk at a time."""
    out = []
    ws_url = url.replace("http://", "ws://") + f"/v1/comparisons/{cid}/ws"
    async with websockets.connect(ws_url, max_size=None) as ws, httpx.AsyncClient(
        base_url=url, timeout=120
    ) as client:
        await ws.recv()  # snapshot
        for body in chunks:
            payload = json.dumps(body)
            started = time.perf_counter()
            reply = await client.post(f"/v1/comparisons/{cid}/chunks", content=payload,
                                      headers={"content-type": "application/json"})
            sequence = reply.json()["sequence"]
            while True:
                message = json.loads(await ws.recv())["evidence"]
                if message["sequence"] >= sequence and message["compute_seconds"] is not None:
                    break
            out.append((time.perf_counter() - started, float(message["compute_seconds"])))
    return out


def throughput(client: httpx.Client, cid: str, chunks: list[dict[str, Any]]) -> dict[str, float]:
    started = time.perf_counter()
    for body in chunks:
        client.post(f"/v1/comparisons/{cid}/chunks", json=body).raise_for_status()
    posted = time.perf_counter() - started
    while client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] < len(chunks):
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    rows = sum(len(c["y"]) for c in chunks)
    return {"rows_per_s": rows / elapsed, "chunks_per_s": len(chunks) / elapsed,
            "ingest_only_chunks_per_s": len(chunks) / posted}


def evidence_rps(url: str, cid: str, seconds: float, threads: int = 4) -> float:
    """GET /evidence per second: keep-alive ``http.client`` connections in threads (a lighter
    client than httpx, so the server, not the client, is what is measured)."""
    host, port = url.removeprefix("http://").split(":")
    path = f"/v1/comparisons/{cid}/evidence"
    counts = [0] * threads
    deadline = time.perf_counter() + seconds

    def hammer(index: int) -> None:
        connection = http.client.HTTPConnection(host, int(port))
        while time.perf_counter() < deadline:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            assert response.status == 200
            counts[index] += 1
        connection.close()

    started = time.perf_counter()
    pool = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def history_growth(url: str, cid: str, total_rows: int, chunk: int, probes: int) -> list[dict]:
    """Per-chunk overhead (latency minus compute) at several history sizes, exact estimator."""
    x, y = data(chunk, 1)
    body = {"x": x.tolist(), "y": y.tolist()}
    points, seen = [], 0
    marks = sorted({int(total_rows * f) for f in (0.0, 0.01, 0.1, 0.5, 1.0)})
    with httpx.Client(base_url=url, timeout=120) as client:
        for mark in marks:
            sequence = 0
            while seen < mark:  # grow the history quickly (no waiting per chunk) ...
                reply = client.post(f"/v1/comparisons/{cid}/chunks", json=body)
                sequence = reply.json()["sequence"]
                seen += chunk
            while client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] < sequence:
                time.sleep(0.05)  # ... then let the worker drain the backlog before probing
            measured = asyncio.run(latencies(url, cid, [body] * probes))
            seen += chunk * probes
            overhead = [lat - comp for lat, comp in measured]
            points.append({"history_rows": seen, "overhead_p50_ms": 1e3 * statistics.median(
                overhead), "overhead_p99_ms": 1e3 * percentile(overhead, 99)})
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--history-rows", type=int, default=1_000_000)
    parser.add_argument("--parts", default="latency,ingest,rps,history",
                        help="comma-separated subset of latency,ingest,rps,history")
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON path (default results/service.json)")
    args = parser.parse_args()
    if args.quick:
        args.chunks, args.history_rows, args.particles = 8, 20_000, 16
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {"chunk_rows": args.chunk, "models": len(MODELS),
                               "particles": args.particles}
    with tempfile.TemporaryDirectory() as scratch:
        process, url = start_server(scratch)
        try:
            with httpx.Client(base_url=url, timeout=120) as client:
                x, y = data(args.chunk * args.chunks * 2, 0)
                chunks = [{"x": x[i : i + args.chunk].tolist(), "y": y[i : i + args.chunk].tolist()}
                          for i in range(0, len(y), args.chunk)]
                cid = create(client, "sgais", particles=args.particles)
                if "latency" in parts:
                    measured = asyncio.run(latencies(url, cid, chunks[: args.chunks]))
                    results["latency"] = summarise(measured)
                if "ingest" in parts:
                    cid2 = create(client, "sgais", particles=args.particles)
                    results["ingest"] = throughput(client, cid2, chunks[args.chunks :])
                if "rps" in parts:
                    results["get_evidence_rps"] = evidence_rps(url, cid, 3.0)
                cid3 = create(client, "exact")
            if "history" in parts:
                results["history_growth"] = history_growth(url, cid3, args.history_rows,
                                                           args.chunk, probes=20)
        finally:
            process.terminate()
            process.wait(timeout=60)
    args.output = write_json("service", results, args.output)
    report(results)
    print(f"wrote {args.output}")


def summarise(measured: list[tuple[float, float]]) -> dict[str, float]:
    latency = [lat for lat, _ in measured]
    compute = [comp for _, comp in measured]
    overhead = [lat - comp for lat, comp in measured]
    return {
        "p50_ms": 1e3 * statistics.median(latency),
        "p99_ms": 1e3 * percentile(latency, 99),
        "compute_p50_ms": 1e3 * statistics.median(compute),
        "compute_max_ms": 1e3 * max(compute),
        "overhead_p50_ms": 1e3 * statistics.median(overhead),
        "overhead_p99_ms": 1e3 * percentile(overhead, 99),
        "overhead_p50_fraction_of_compute_p50": statistics.median(overhead)
        / statistics.median(compute),
    }


def report(results: dict[str, Any]) -> None:
    if "latency" in results:
        lat = results["latency"]
        print(f"chunk -> websocket latency: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} "
              f"ms (estimator p50 {lat['compute_p50_ms']:.1f} ms, max {lat['compute_max_ms']:.0f}"
              " ms)")
        print(f"  beyond the estimator: p50 {lat['overhead_p50_ms']:.1f} ms, p99 "
              f"{lat['overhead_p99_ms']:.1f} ms; p50 overhead / p50 estimator = "
              f"{100 * lat['overhead_p50_fraction_of_compute_p50']:.1f}% (target <= 10%)")
    if "ingest" in results:
        ing = results["ingest"]
        print(f"ingest, {len(MODELS)} models: {ing['rows_per_s']:.0f} rows/s, "
              f"{ing['chunks_per_s']:.2f} chunks/s end to end; "
              f"{ing['ingest_only_chunks_per_s']:.0f} chunks/s accepted")
    if "get_evidence_rps" in results:
        print(f"GET evidence: {results['get_evidence_rps']:.0f} requests/s (target >= 500)")
    for point in results.get("history_growth", []):
        print(f"history {point['history_rows']:>9} rows: overhead p50 "
              f"{point['overhead_p50_ms']:.1f} ms, p99 {point['overhead_p99_ms']:.1f} ms")


if __name__ == "__main__":
    main()
