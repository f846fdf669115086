"""Connection floods against a real deployment: does a flood of idle TCP connections, or of
websockets, slow a healthy comparison down?

Starts redis-server on its own port, ``modelcompare serve`` and one ``modelcompare worker``
(tests/faults/fault_processes.py) and one comparison that a client feeds a 20-row chunk every
0.25 s with ``?wait=true``. A chunk's latency runs from its first try to its 200 (applied): a
5xx or a lost connection is retried at once with the same ``Idempotency-Key``, as a careful
client would. Three windows of ``--seconds`` each; the flood starts 3 s in and is held to the
end, and the chunks sent from then on are counted:

- ``none``: no flood (the baseline);
- ``idle``: ``--idle`` silent TCP connections (20,000) held by ``--idle-processes`` client
  processes (the per-process file limit is 20,000): opened as fast as they can, and each one
  the server closes or refuses opened again 10 s later;
- ``websockets``: ``--websockets`` websockets (1,100) to the comparison's ``/ws``, opened at
  once from one process and read; each one closed or refused is opened again 10 s later. Every
  try counts as accepted (its snapshot came) or refused, with what it was told: a close code
  and reason, an HTTP status, or only a failed handshake.

``--baseline REF`` runs the same against REF's code (a git archive) first, and prints both.
Target: healthy p99 ≤ 2 s in every window, and every refused websocket told why (a close code
with a reason, or an HTTP status). Writes benchmarks/results/floods.json; ``--quick``: 15-s
windows, the current code only (results/quick/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import websockets
from _common import QUICK, checkout, environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

LINE = {"name": "line", "family": "linear_regression", "config": {"dim": 1}}
FLOOD_AT = 3.0  # seconds into a window when the flood starts
CONNECTS_IN_FLIGHT = 500  # per idle-flood process
REOPEN_AFTER = 10.0  # seconds before a flood connection the server closed or refused is reopened


# ---- the flood clients: each runs in a process of its own (spawned) ----

def hold_idle(port: int, count: int, go: Event, stop: Event, results: Any) -> None:
    """Once ``go`` is set, hold ``count`` silent connections until ``stop``: each opened as fast
    as the process can, and opened again ``REOPEN_AFTER`` s after the server closes or refuses
    it; report how every connection ended, how many were held at the stop, and how long the
    first ``count`` took to open."""

    async def slot(gate: asyncio.Semaphore, tally: Counter[str], held: set[int]) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with socket.socket() as sock:
                sock.setblocking(False)
                try:
                    async with gate, asyncio.timeout(30):
                        await loop.sock_connect(sock, ("127.0.0.1", port))
                    tally["opened"] += 1
                    held.add(sock.fileno())
                    tally[ending(await loop.sock_recv(sock, 4096))] += 1
                except (OSError, TimeoutError) as exc:
                    tally[f"failed ({type(exc).__name__})"] += 1
                finally:
                    held.discard(sock.fileno())
            await asyncio.sleep(REOPEN_AFTER)

    async def flood() -> None:
        tally: Counter[str] = Counter()
        held: set[int] = set()
        gate = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        started = time.monotonic()
        slots = [asyncio.create_task(slot(gate, tally, held)) for _ in range(count)]
        opening = None
        while not stop.is_set():
            await asyncio.sleep(0.1)
            if opening is None and tally["opened"] + sum(
                    n for o, n in tally.items() if o.startswith("failed")) >= count:
                opening = time.monotonic() - started
        at_stop = len(held)
        results.put({"outcomes": dict(tally), "held_at_stop": at_stop, "opening_s": opening})
        for task in slots:
            task.cancel()

    results.put("ready")
    go.wait()
    asyncio.run(flood())


def ending(data: bytes) -> str:
    """How the server ended a silent connection: closed it, or answered (its status)."""
    if not data:
        return "closed by the server"
    status = data.split(b"\r\n", 1)[0].split()
    return f"answered {status[1].decode(errors='replace')}" if len(status) > 1 else "data"


def hold_websockets(url: str, count: int, go: Event, stop: Event, results: Any) -> None:
    """Once ``go`` is set, hold ``count`` websockets until ``stop``: all opened at once, each
    read until the stop, one closed or refused opened again ``REOPEN_AFTER`` s later; report
    the outcome of every try (``accepted``, or what the refused one was told), of the first
    ``count`` on their own, how many were open at the stop and the updates read."""

    async def once(received: list[int], held: set[int], token: int) -> str:
        try:
            async with websockets.connect(url, open_timeout=30, close_timeout=1) as ws:
                async with asyncio.timeout(30):
                    first = json.loads(await ws.recv())
                if first.get("type") != "snapshot":
                    return f"first message {first.get('type')}"
                held.add(token)  # until the server ends it: still open at the stop
                try:
                    while not stop.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.5):
                                await ws.recv()
                                received[0] += 1
                except BaseException:
                    held.discard(token)
                    raise
                return "accepted"
        except websockets.ConnectionClosed as exc:
            if exc.rcvd is None:
                return "closed without a close frame"
            return f"close {exc.rcvd.code} {exc.rcvd.reason!r}"
        except websockets.InvalidStatus as exc:
            return f"HTTP {exc.response.status_code}"
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            return f"failed handshake ({type(exc).__name__})"

    async def slot(token: int, first: Counter[str], tally: Counter[str], received: list[int],
                   held: set[int]) -> None:
        tries = first
        while not stop.is_set():
            outcome = await once(received, held, token)
            tally[outcome] += 1
            tries[outcome] += 1
            tries = Counter()  # the later tries count in ``tally`` only
            if not stop.is_set():
                await asyncio.sleep(REOPEN_AFTER)

    async def flood() -> None:
        first: Counter[str] = Counter()
        tally: Counter[str] = Counter()
        received, held = [0], set[int]()
        slots = [asyncio.create_task(slot(i, first, tally, received, held))
                 for i in range(count)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        at_stop = len(held)
        await asyncio.wait(slots, timeout=5)
        results.put({"outcomes": dict(tally), "first": dict(first), "held_at_stop": at_stop,
                     "updates_read": received[0]})
        for task in slots:
            task.cancel()

    results.put("ready")
    go.wait()
    asyncio.run(flood())


# ---- the healthy comparison and the windows ----

@dataclass
class Healthy:
    """Feeds one comparison 20-row chunks with ``?wait=true`` in a thread."""

    url: str
    cid: str
    chunks: list[tuple[float, float, int]] = field(default_factory=list)  # sent, latency, tries
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._feed, daemon=True).start()

    def _feed(self) -> None:
        rng = np.random.default_rng(0)
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.wait(0.25):
                x = rng.normal(size=(20, 1))
                body = {"x": x.tolist(), "y": (0.5 * x[:, 0] + rng.normal(size=20)).tolist()}
                self.chunks.append(self._post(client, body))

    def _post(self, client: httpx.Client, body: dict[str, Any]) -> tuple[float, float, int]:
        key = uuid.uuid4().hex
        started, tries = time.monotonic(), 0
        while not self.stop.is_set():
            tries += 1
            try:
                response = client.post(f"/v1/comparisons/{self.cid}/chunks?wait=true",
                                       json=body, headers={"Idempotency-Key": key})
                if response.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        return started, time.monotonic() - started, tries

    def figures(self, start: float, end: float) -> dict[str, Any]:
        inside = [c for c in self.chunks if start <= c[0] <= end]
        latencies = np.asarray([c[1] for c in inside])
        return {"chunks": len(inside), "retried": sum(c[2] > 1 for c in inside),
                "p50_s": float(np.percentile(latencies, 50)),
                "p99_s": float(np.percentile(latencies, 99)), "max_s": float(latencies.max()),
                # each chunk: seconds from the window's start to when it was sent, latency
                "series": [(round(c[0] - start, 3), round(c[1], 3)) for c in inside]}


def api_sampler(pid: int, stop: threading.Event, peaks: dict[str, float]) -> None:
    api = psutil.Process(pid)
    while not stop.wait(0.5):
        try:
            peaks["fds"] = max(peaks.get("fds", 0), api.num_fds())
            peaks["rss_mb"] = max(peaks.get("rss_mb", 0), api.memory_info().rss / 2**20)
        except psutil.Error:
            return


def window(deployment: Deployment, healthy: Healthy, flood: str, args: argparse.Namespace,
           cid: str) -> dict[str, Any]:
    """One window: the healthy chunks, with ``flood`` (none, idle, websockets) from 3 s on."""
    spawn = multiprocessing.get_context("spawn")
    go, stop, results = spawn.Event(), spawn.Event(), spawn.Queue()
    port = deployment.api.port
    if flood == "idle":
        share = -(-args.idle // args.idle_processes)
        clients = [spawn.Process(target=hold_idle, args=(port, share, go, stop, results))
                   for _ in range(args.idle_processes)]
    elif flood == "websockets":
        url = f"ws://127.0.0.1:{port}/v1/comparisons/{cid}/ws"
        clients = [spawn.Process(target=hold_websockets,
                                 args=(url, args.websockets, go, stop, results))]
    else:
        clients = []
    for client in clients:
        client.start()
    for _ in clients:  # their imports done, before the window
        assert results.get(timeout=300) == "ready"
    peaks: dict[str, float] = {}
    sampling = threading.Event()
    threading.Thread(target=api_sampler, args=(deployment.api.process.pid, sampling, peaks),
                     daemon=True).start()
    opened = time.monotonic()
    time.sleep(FLOOD_AT)
    started = time.monotonic()
    go.set()
    time.sleep(max(args.seconds - FLOOD_AT, 1))
    ended = time.monotonic()
    stop.set()
    reports = [results.get(timeout=120) for _ in clients]
    for client in clients:
        client.join(timeout=10)
        if client.is_alive():  # a task that took no cancellation: its report is in
            client.terminate()
    sampling.set()
    figures = healthy.figures(opened if flood == "none" else started, ended)
    row: dict[str, Any] = {"flood": flood, **figures, "api_peak_fds": peaks.get("fds"),
                           "api_peak_rss_mb": peaks.get("rss_mb")}
    outcomes: Counter[str] = sum((Counter(r["outcomes"]) for r in reports), Counter())
    if flood == "idle":
        row.update(connections=dict(outcomes),
                   held_at_stop=sum(r["held_at_stop"] for r in reports),
                   opening_s=max(r["opening_s"] or math.nan for r in reports))
    elif flood == "websockets":
        told = sum(n for o, n in outcomes.items() if o.startswith(("close ", "HTTP ")))
        row.update(websockets=dict(outcomes), first_tries=reports[0]["first"],
                   held_at_stop=reports[0]["held_at_stop"],
                   updates_read=reports[0]["updates_read"],
                   refused=sum(n for o, n in outcomes.items() if o != "accepted"),
                   refused_told_why=told)
    time.sleep(3)  # the closed connections wound down before the next window
    return row


def run(root: Path, data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    deployment = Deployment(data, workers=1, appendfsync="everysec", root=root,
                            poll_interval=0.05)
    deployment.start()
    try:
        with httpx.Client(base_url=deployment.api.url, timeout=60) as client:
            cid = client.post("/v1/comparisons", json={
                "name": "healthy", "models": [LINE], "x_dim": 1,
                "estimator": {"method": "exact"}}).json()["id"]
        healthy = Healthy(deployment.api.url, cid)
        healthy.start()
        rows = []
        for flood in ("none", "idle", "websockets"):
            rows.append(window(deployment, healthy, flood, args, cid))
            print(f"  {flood}: {summary(rows[-1])}", flush=True)
        healthy.stop.set()
        return rows
    finally:
        deployment.stop()


def summary(row: dict[str, Any]) -> str:
    text = (f"p50 {row['p50_s']:.3f} s, p99 {row['p99_s']:.3f} s, max {row['max_s']:.3f} s "
            f"over {row['chunks']} chunks ({row['retried']} retried); API peak "
            f"{row['api_peak_fds']} fds")
    if row["flood"] == "idle":
        text += (f"; connections {row['connections']}, the first {row['opening_s']:.1f} s to "
                 f"open, {row['held_at_stop']} held at the end")
    if row["flood"] == "websockets":
        text += (f"; websockets, first tries {row['first_tries']}, all tries "
                 f"{row['websockets']}, {row['held_at_stop']} open at the end")
    return text


def passes(rows: list[dict[str, Any]]) -> bool:
    return all(r["p99_s"] <= 2.0 for r in rows) and all(
        r["refused"] == r["refused_told_why"] for r in rows if r["flood"] == "websockets")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=None,
                        help="length of each window (default 60; --quick 15)")
    parser.add_argument("--idle", type=int, default=20_000, help="idle TCP connections")
    parser.add_argument("--idle-processes", type=int, default=4)
    parser.add_argument("--websockets", type=int, default=1_100)
    parser.add_argument("--baseline", default=None, help="a git ref to run beside the checkout")
    parser.add_argument("--quick", action="store_true", help="15-s windows, no baseline")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    args.seconds = args.seconds or (15.0 if QUICK else 60.0)

    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline and not QUICK:
            print(f"baseline ({args.baseline}):", flush=True)
            root = checkout(args.baseline, Path(tmp) / "baseline-code")
            runs["baseline"] = run(root, Path(tmp) / "baseline", args)
        print("current:", flush=True)
        runs["current"] = run(ROOT, Path(tmp) / "current", args)

    print(table(["code", "flood", "chunks", "retried", "p50 s", "p99 s", "max s", "API fds"],
                [[code, r["flood"], r["chunks"], r["retried"], r["p50_s"], r["p99_s"],
                  r["max_s"], r["api_peak_fds"]] for code, rows in runs.items() for r in rows]))
    for code, rows in runs.items():
        for r in rows:
            if r["flood"] == "websockets":
                print(f"{code} websockets: {r['held_at_stop']} open at the end; first tries "
                      f"{r['first_tries']}; {r['refused']} tries refused, "
                      f"{r['refused_told_why']} of them told why")
    ok = passes(runs["current"])
    print(f"healthy p99 ≤ 2 s under every flood, every refused websocket told why: "
          f"{verdict(ok)}")
    setup = {"seconds": args.seconds, "flood_at_s": FLOOD_AT, "idle": args.idle,
             "idle_processes": args.idle_processes, "websockets": args.websockets,
             "chunk_rows": 20, "chunk_every_s": 0.25, "workers": 1}
    path = write_json("floods", {"environment": environment(1), "setup": setup,
                                 "baseline": args.baseline, "runs": runs, "pass": ok},
                      args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
