"""Hostile and careless traffic against a real deployment: does one request take the service
from everyone else?

Starts redis-server on its own port, ``modelcompare serve`` and ``--workers`` worker processes
(benchmarks/load.py's harness), one unrelated comparison that a background client feeds a
20-row chunk every 0.25 s with ``?wait=true`` (its latency: accepted → applied), and a sampler
of the API's and the workers' RSS and Redis' memory every 0.1 s. Then it sends each hostile
request (``requests()`` below: oversized settings, bodies, headers and chunks, floods of
connections, reads and websockets, and more) in turn and prints, per request: the status it got,
the worst API and worker RSS and Redis memory while it ran, how long an unrelated chunk then
took to be applied, and the unrelated comparison's p99 chunk latency during it.

Targets: every hostile request gets a 4xx (or a bounded, documented outcome), no process grows
past 1 GB, the unrelated comparison keeps p99 ≤ 2 s. Writes benchmarks/results/abuse.json;
``--quick`` runs smaller floods (results/quick/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import redis
import websockets
from _common import environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

GB = 1024**3
LINE = {"name": "line", "family": "linear_regression", "config": {"dim": 1}}


@dataclass
class Monitor:
    """Samples memory and feeds the unrelated comparison in background threads."""

    deployment: Deployment
    cid: str
    samples: list[tuple[float, float, float, float]] = field(default_factory=list)
    chunks: list[tuple[float, float, int]] = field(default_factory=list)  # start, latency, status
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        for target in (self._sample, self._feed):
            threading.Thread(target=target, daemon=True).start()

    def _sample(self) -> None:
        store = redis.Redis.from_url(self.deployment.redis.url)
        api = psutil.Process(self.deployment.api.process.pid)
        workers = [psutil.Process(w.process.pid) for w in self.deployment.workers]
        while not self.stop.wait(0.1):
            try:
                redis_bytes = float(store.info("memory")["used_memory"])
            except redis.RedisError:
                redis_bytes = float("nan")
            self.samples.append((time.monotonic(), float(api.memory_info().rss),
                                 max(float(w.memory_info().rss) for w in workers), redis_bytes))

    def _feed(self) -> None:
        rng = np.random.default_rng(0)
        with httpx.Client(base_url=self.deployment.api.url, timeout=60) as client:
            while not self.stop.wait(0.25):
                x = rng.normal(size=(20, 1))
                body = {"x": x.tolist(), "y": (0.5 * x[:, 0] + rng.normal(size=20)).tolist()}
                self.chunks.append(post_applied(client, self.cid, body))

    def window(self, start: float, end: float) -> dict[str, float]:
        inside = [s for s in self.samples if start <= s[0] <= end] or self.samples[-1:]
        latencies = [c[1] for c in self.chunks if start <= c[0] <= end]
        failed = sum(c[2] != 200 for c in self.chunks if start <= c[0] <= end)
        return {"api_rss_gb": max(s[1] for s in inside) / GB,
                "worker_rss_gb": max(s[2] for s in inside) / GB,
                "redis_gb": max(s[3] for s in inside) / GB,
                "unrelated_p99_s": float(np.percentile(latencies, 99)) if latencies else
                float("nan"),
                "unrelated_chunks": len(latencies), "unrelated_failed": failed}


def post_applied(client: httpx.Client, cid: str, body: dict[str, Any]) -> tuple[float, float, int]:
    started = time.monotonic()
    try:
        status = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=body).status_code
    except httpx.HTTPError:
        status = 0
    return started, time.monotonic() - started, status


def create(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/comparisons", json={"name": "hostile", **body})


def status_of(response: httpx.Response) -> str:
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = ""
    return f"{response.status_code} {code}".strip()


# ---- the hostile requests: each returns what it got (a short text) ----

def huge_setting(client: httpx.Client, url: str) -> str:
    return status_of(create(client, {"models": [LINE], "x_dim": 1, "estimator": {
        "method": "sgais", "hmc_moves": 1_000_000_000}}))


def largest_allowed_work(client: httpx.Client, url: str) -> str:
    """The most work per chunk the bounds allow: 16 islands of 1024 particles, 64 HMC moves ×
    100 leapfrog steps on 21 parameters, 1000 rows: refused by nothing, bounded by the update
    budget."""
    response = create(client, {"models": [{**LINE, "config": {"dim": 20}}], "x_dim": 20,
                               "estimator": {"method": "sgais", "particles": 1024,
                                             "islands": 16, "hmc_moves": 64,
                                             "leapfrog_steps": 100}})
    if response.status_code != 201:
        return status_of(response)
    cid = response.json()["id"]
    rng = np.random.default_rng(1)
    body = {"x": rng.normal(size=(1000, 20)).tolist(), "y": rng.normal(size=1000).tolist()}
    client.post(f"/v1/comparisons/{cid}/chunks", json=body)
    started = time.monotonic()
    while time.monotonic() - started < 600:
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        if evidence["sequence"] >= 1 or evidence.get("halted_at"):
            break
        time.sleep(0.5)
    outcome = "applied" if evidence["sequence"] >= 1 else f"halted ({evidence['status']})"
    client.delete(f"/v1/comparisons/{cid}")
    return f"201, chunk {outcome} after {time.monotonic() - started:.0f} s"


def mixture(components: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        model = {"name": "mix", "family": "gaussian_mixture",
                 "config": {"dim": 1, "components": components}}
        return status_of(create(client, {"models": [model], "x_dim": 1}))
    return request


def wide(x_dim: int | None, column: int | None) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        model = {**LINE, "columns": [column]} if column is not None else LINE
        body: dict[str, Any] = {"models": [model]}
        if x_dim is not None:
            body["x_dim"] = x_dim
        return status_of(create(client, body))
    return request


def big_predict(rows: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        cid = create(client, {"models": [LINE], "x_dim": 1,
                              "estimator": {"method": "exact"}}).json()["id"]
        body = b'{"x": [' + b"[0.5]," * (rows - 1) + b"[0.5]]}"
        response = client.post(f"/v1/comparisons/{cid}/predict", content=body,
                               headers={"content-type": "application/json"})
        client.delete(f"/v1/comparisons/{cid}")
        return f"{status_of(response)} ({len(body) / 1e6:.0f} MB body)"
    return request


def big_chunk(rows: int, x_dim: int) -> Callable[[httpx.Client, str], str]:
    """A chunk body of about 62 MiB: many short rows, or few wide ones."""
    def request(client: httpx.Client, url: str) -> str:
        cid = create(client, {"models": [LINE], "x_dim": x_dim,
                              "estimator": {"method": "exact"}}).json()["id"]
        row = b"[" + b"0.5," * (x_dim - 1) + b"0.5]"
        body = (b'{"x": [' + b",".join([row] * rows) + b'], "y": ['
                + b",".join([b"0.5"] * rows) + b"]}")
        response = client.post(f"/v1/comparisons/{cid}/chunks", content=body,
                               headers={"content-type": "application/json"})
        client.delete(f"/v1/comparisons/{cid}")
        return f"{status_of(response)} ({len(body) / 2**20:.0f} MiB body)"
    return request


def many_exact_models(dim: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        models = [{"name": f"m{i}", "family": "linear_regression", "config": {"dim": dim}}
                  for i in range(20)]
        return status_of(create(client, {"models": models, "estimator": {"method": "exact"}}))
    return request


def idle_connections(count: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        host, port = url.removeprefix("http://").split(":")
        held = []
        for _ in range(count):
            try:
                held.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:
                break
        started = time.monotonic()
        first_ok = None
        statuses: dict[int, int] = {}
        while time.monotonic() - started < 60:
            try:
                code = httpx.get(f"{url}/healthz", timeout=5).status_code
            except httpx.HTTPError:
                code = 0
            statuses[code] = statuses.get(code, 0) + 1
            if code == 200:
                first_ok = time.monotonic() - started
                break
            time.sleep(0.2)
        for sock in held:
            sock.close()
        served = "never" if first_ok is None else f"after {first_ok:.1f} s"
        return f"{len(held)} held; real requests {statuses}, first 200 {served}"
    return request


def huge_header(size: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        host, port = url.removeprefix("http://").split(":")
        started = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            sent, piece = 0, b"a" * 65536
            try:
                while sent < size:
                    sock.sendall(piece)
                    sent += len(piece)
                sock.sendall(b"\r\n\r\n")
            except OSError:
                pass
            try:
                reply = sock.recv(64).split(b"\r\n")[0].decode()
            except OSError as exc:
                reply = type(exc).__name__
        return (f"{reply or 'closed'} after {sent / 1e6:.1f} MB sent, "
                f"{time.monotonic() - started:.1f} s")
    return request


def concurrent_reads(count: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        cid = create(client, {"models": [LINE], "x_dim": 1}).json()["id"]

        async def burst() -> list[int]:
            limits = httpx.Limits(max_connections=count)
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
                replies = await asyncio.gather(
                    *(http.get(f"/v1/comparisons/{cid}/evidence") for _ in range(count)),
                    return_exceptions=True)
            return [r.status_code if isinstance(r, httpx.Response) else 0 for r in replies]

        statuses = asyncio.run(burst())
        client.delete(f"/v1/comparisons/{cid}")
        return str({code: statuses.count(code) for code in sorted(set(statuses))})
    return request


def websocket_burst(count: int) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        cid = create(client, {"models": [LINE], "x_dim": 1}).json()["id"]
        ws_url = url.replace("http://", "ws://") + f"/v1/comparisons/{cid}/ws"

        async def one() -> str:
            try:
                async with websockets.connect(ws_url, open_timeout=30) as ws:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    return str(message["type"])
            except websockets.ConnectionClosed as exc:
                return f"closed {exc.rcvd.code if exc.rcvd else 'without frame'}"
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                return type(exc).__name__

        async def burst() -> list[str]:
            return list(await asyncio.gather(*(one() for _ in range(count))))

        outcomes = asyncio.run(burst())
        client.delete(f"/v1/comparisons/{cid}")
        return str({o: outcomes.count(o) for o in sorted(set(outcomes))})
    return request


def text_plain_chunk(client: httpx.Client, url: str) -> str:
    cid = create(client, {"models": [LINE], "x_dim": 1}).json()["id"]
    response = client.post(f"/v1/comparisons/{cid}/chunks", content='{"x": [[1]], "y": [1]}',
                           headers={"content-type": "text/plain"})
    client.delete(f"/v1/comparisons/{cid}")
    return status_of(response)


def model_outside_support(family: str, y: float) -> Callable[[httpx.Client, str], str]:
    def request(client: httpx.Client, url: str) -> str:
        cid = create(client, {"models": [LINE], "x_dim": 1,
                              "estimator": {"method": "exact"}}).json()["id"]
        client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                    json={"x": [[0.0], [1.0]], "y": [1.0, y]})
        response = client.post(f"/v1/comparisons/{cid}/models",
                               json={"name": "added", "family": family})
        client.delete(f"/v1/comparisons/{cid}")
        return status_of(response)
    return request


def huge_priors(client: httpx.Client, url: str) -> str:
    models = [{"name": n, "family": "beta_bernoulli", "prior_probability": 1e308} for n in "ab"]
    return status_of(create(client, {"models": models}))


def with_rules(rules: list[dict[str, Any]]) -> Callable[[httpx.Client, str], str]:
    """A comparison created with ``rules`` (of two models, so that the rules name them)."""
    def request(client: httpx.Client, url: str) -> str:
        models = [{**LINE, "name": "a"}, {**LINE, "name": "b"}]
        return status_of(create(client, {"models": models, "x_dim": 1, "rules": rules}))
    return request


def bf_rule(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "when": {"log_bayes_factor": {"model": "b", "against": "a",
                                                        "above": 3.0}}, **extra}


def requests(quick: bool) -> list[tuple[str, Callable[[httpx.Client, str], str]]]:
    return [
        ('sgais "hmc_moves": 1e9', huge_setting),
        ("largest allowed sgais work, 1000-row chunk", largest_allowed_work),
        ("gaussian_mixture, 8 components", mixture(8)),
        ("gaussian_mixture, 9 components", mixture(9)),
        ("x_dim 4,000,000", wide(4_000_000, None)),
        ("x_dim 1e18", wide(10**18, None)),
        ("columns [1e9]", wide(None, 10**9)),
        ("predict, 3e6 rows", big_predict(300_000 if quick else 3_000_000)),
        ("chunk of 62 MiB, 1-number rows", big_chunk(6_500_000 if not quick else 650_000, 1)),
        ("chunk of 61 MiB, 10,000-number rows", big_chunk(1_600 if not quick else 160, 10_000)),
        ("chunk of 15 MiB, 10,000-number rows", big_chunk(390 if not quick else 39, 10_000)),
        ("20 exact linear_regression, dim 1999", many_exact_models(1999)),
        ("20 exact linear_regression, dim 999", many_exact_models(999)),
        ("idle TCP connections", idle_connections(1500 if quick else 15_000)),
        ("100 MB request header", huge_header(10_000_000 if quick else 100_000_000)),
        ("300 concurrent GET evidence", concurrent_reads(300)),
        ("300 websockets in a burst", websocket_burst(300)),
        ("chunk as text/plain", text_plain_chunk),
        ("gamma_poisson added after y = -3.7", model_outside_support("gamma_poisson", -3.7)),
        ("beta_bernoulli added after y = 0.5", model_outside_support("beta_bernoulli", 0.5)),
        ("two prior_probability 1e308", huge_priors),
        ("21 decision rules", with_rules([bf_rule(f"r{i}") for i in range(21)])),
        ("window rule of 1e12 rows", with_rules([{"name": "w", "when": {
            "window_log_bayes_factor": {"model": "b", "against": "a", "above": 3.0,
                                        "rows": 10**12}}}])),
        ("webhook to the metadata address", with_rules([bf_rule(
            "m", webhook="http://169.254.169.254/latest/meta-data/")])),
        ("webhook to 10.0.0.1", with_rules([bf_rule("p", webhook="http://10.0.0.1/hook")])),
        ("webhook to localhost", with_rules([bf_rule("l", webhook="http://localhost:6379/")])),
        ("webhook URL of 100,000 characters", with_rules([bf_rule(
            "u", webhook="https://example.com/" + "a" * 100_000)])),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--update-budget", type=float, default=5.0,
                        help="MODELCOMPARE_UPDATE_BUDGET of the deployment (s)")
    parser.add_argument("--quick", action="store_true", help="smaller floods")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        deployment = Deployment(Path(tmp), workers=args.workers, appendfsync="everysec",
                                poll_interval=0.05, update_budget=args.update_budget)
        deployment.start()
        try:
            with httpx.Client(base_url=deployment.api.url, timeout=120) as client:
                cid = client.post("/v1/comparisons", json={
                    "name": "unrelated", "models": [LINE], "x_dim": 1,
                    "estimator": {"method": "exact"}}).json()["id"]
                monitor = Monitor(deployment, cid)
                monitor.start()
                time.sleep(2)
                baseline = monitor.window(0, time.monotonic())
                for label, request in requests(args.quick):
                    started = time.monotonic()
                    outcome = request(client, deployment.api.url)
                    ended = time.monotonic()
                    _, after, status = post_applied(client, cid, {"x": [[0.1]], "y": [0.2]})
                    rows.append({"request": label, "outcome": outcome,
                                 "seconds": ended - started,
                                 "unrelated_chunk_after_s": after if status == 200 else None,
                                 **monitor.window(started, time.monotonic())})
                    print(f"{label}: {outcome}", flush=True)
                monitor.stop.set()
                overall = monitor.window(0, time.monotonic())
        finally:
            deployment.stop()

    worst = max(max(r["api_rss_gb"], r["worker_rss_gb"], r["redis_gb"]) for r in rows)
    results = {"setup": {"workers": args.workers, "update_budget_s": args.update_budget,
                         "quick": args.quick},
               "environment": environment(1), "baseline": baseline, "overall": overall,
               "rows": rows, "worst_process_gb": worst,
               "memory_target_met": worst <= 1.0,
               "latency_target_met": overall["unrelated_p99_s"] <= 2.0}
    path = write_json("abuse", results, args.output)
    print(table(["request", "outcome", "API GB", "worker GB", "Redis GB", "next chunk s",
                 "p99 s"],
                [[r["request"], r["outcome"], r["api_rss_gb"], r["worker_rss_gb"],
                  r["redis_gb"], r["unrelated_chunk_after_s"], r["unrelated_p99_s"]]
                 for r in rows]))
    print(f"unrelated comparison: {overall['unrelated_chunks']} chunks, p99 "
          f"{overall['unrelated_p99_s']:.2f} s, {overall['unrelated_failed']} failed "
          f"(baseline p99 {baseline['unrelated_p99_s']:.2f} s); worst process {worst:.2f} GB")
    print(f"memory ≤ 1 GB: {verdict(results['memory_target_met'])}; unrelated p99 ≤ 2 s: "
          f"{verdict(results['latency_target_met'])}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
