"""Webhook trials on a real deployment, the deployment part of benchmarks/decisions.py: rules
fire and their webhooks reach a receiver through worker kills and a receiver outage.

redis-server (AOF, ``appendfsync always``), ``modelcompare serve`` and one separate
``modelcompare worker`` (tests/faults/fault_processes.py), and a webhook receiver on 127.0.0.1
(the operator allows it: MODELCOMPARE_WEBHOOK_ALLOWED_NETWORKS). ``comparisons`` comparisons of
models a ⊂ b (SG-AIS, b true) each carry rules "log BF(b : a) above t" for a ladder of t and
"posterior probability of b above p", each with the receiver as its webhook, and subscribe a
websocket before their chunks arrive, one chunk of each every ``pace`` seconds. Every
``kill_every`` seconds or so the worker is SIGKILLed while it holds a comparison's lease (it is
applying a chunk) and started again, and from a third of the chunks on the receiver is down (its
port closed) for ``outage`` seconds. Then: every event id of GET …/events reached the receiver, its
body is the event, its signature verifies with the comparison's secret, and the websocket sent
the same events; the receiver dedupes by the id (the Modelcompare-Event-Id header) and counts
what arrived more than once.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
import websockets
from fault_processes import Deployment, restartable_port

from modelcompare.service.store.keys import Keys
from modelcompare.service.webhooks.signing import EVENT_ID_HEADER, SIGNATURE_HEADER, verify

# log BF(b : a) grows by about 0.3²/2 = 0.045 nats a row here: the ladder fires along the stream
THRESHOLDS = (1.0, 3.0, 10.0, 30.0, 60.0, 100.0, 150.0, 200.0, 300.0, 400.0)
PROBABILITIES = (0.9, 0.99, 0.999)
CHUNK_ROWS = 100


class Receiver:
    """Records every POST (headers, body); ``down`` closes the port, ``up`` opens it again."""

    def __init__(self) -> None:
        self.port = restartable_port()
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.arrived: list[float] = []  # Unix time of each delivery
        self.back_at: float | None = None  # Unix time the port opened again after an outage
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.received.append((dict(self.headers.items()), body))
                    receiver.arrived.append(time.time())
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.back_at = time.time()
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def is_down(self) -> bool:
        return self._server is None

    def down(self) -> None:
        self.back_at = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def rules(url: str) -> list[dict[str, Any]]:
    ladder = [{"name": f"bf-above-{t:g}", "webhook": url, "when": {"log_bayes_factor": {
        "model": "b", "against": "a", "above": t}}} for t in THRESHOLDS]
    return ladder + [{"name": f"prob-above-{p:g}", "webhook": url, "when": {
        "posterior_probability": {"model": "b", "above": p}}} for p in PROBABILITIES]


def chunk_list(seed: int, chunks: int) -> list[dict[str, Any]]:
    """x ~ N(0, I₂), y = 0.5·x₁ + 0.3·x₂ + 0.2 + ε (b's weights): b's evidence pulls ahead."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(chunks * CHUNK_ROWS, 2))
    y = 0.5 * x[:, 0] + 0.3 * x[:, 1] + 0.2 + rng.normal(size=len(x))
    return [{"x": x[i:i + CHUNK_ROWS].tolist(), "y": y[i:i + CHUNK_ROWS].tolist()}
            for i in range(0, len(x), CHUNK_ROWS)]


async def follow(url: str, cid: str, chunks: int, ready: threading.Event,
                 found: list[dict[str, Any]], stop: threading.Event) -> None:
    """The event frames of ``cid``'s websocket until it has applied ``chunks`` chunks."""
    async with websockets.connect(f"{url.replace('http', 'ws')}/v1/comparisons/{cid}/ws") as ws:
        ready.set()
        while not stop.is_set():
            try:
                message = json.loads(await asyncio.wait_for(ws.recv(), 1.0))
            except TimeoutError:
                continue
            if message["type"] == "event":
                found.append(message["event"])
            elif message["type"] == "update" and message["evidence"]["sequence"] >= chunks:
                return


def run(workdir: Path, comparisons: int, chunks: int, pace: float, kill_every: float,
        outage: float, timeout: float = 900.0) -> dict[str, Any]:
    receiver = Receiver()
    receiver.up()
    deployment = Deployment(
        workdir, workers=1, webhook_allowed_networks='["127.0.0.1/32"]', webhook_backoff=0.5,
        webhook_backoff_max=4.0, webhook_max_attempts=20, webhook_timeout=2.0)
    deployment.start()
    rng = random.Random(0)
    try:
        http = httpx.Client(base_url=deployment.api.url, timeout=60)
        models = [{"name": "a", "family": "linear_regression", "config": {"dim": 1},
                   "columns": [0]},
                  {"name": "b", "family": "linear_regression", "config": {"dim": 2},
                   "columns": [0, 1]}]
        ids = []
        for index in range(comparisons):
            response = http.post("/v1/comparisons", json={
                "name": f"webhooks-{index}", "models": models, "x_dim": 2,
                "estimator": {"method": "sgais"}, "seed": index, "rules": rules(receiver.url)})
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
        frames: dict[str, list[dict[str, Any]]] = {cid: [] for cid in ids}
        stop = threading.Event()
        threads = []
        for cid in ids:
            ready = threading.Event()
            threads.append(threading.Thread(target=asyncio.run, args=(follow(
                deployment.api.url, cid, chunks, ready, frames[cid], stop),), daemon=True))
            threads[-1].start()
            ready.wait(30)
        feeds = [chunk_list(index, chunks) for index in range(comparisons)]
        store = redis.Redis.from_url(deployment.redis.url)
        leases = [Keys(deployment.prefix, cid).lease for cid in ids]
        started = time.monotonic()
        fed, kills, outage_at, done = 0, 0, None, 0
        next_feed, next_kill, next_look = started, started + kill_every, started
        while done < comparisons * chunks:
            now = time.monotonic()
            assert now - started < timeout, "the chunks were not all applied"
            if fed < chunks and now >= next_feed:  # the next chunk of every comparison
                for cid, feed in zip(ids, feeds, strict=True):
                    response = http.post(f"/v1/comparisons/{cid}/chunks", json=feed[fed])
                    assert response.status_code == 202, response.text
                fed, next_feed = fed + 1, next_feed + pace
            if outage_at is None and fed >= chunks // 3:
                receiver.down()
                outage_at = now
            if outage_at is not None and receiver.is_down and now - outage_at >= outage:
                receiver.up()
            if now >= next_kill and store.exists(*leases):  # the worker is applying a chunk
                deployment.kill_worker(rng)  # SIGKILL, then a fresh worker starts
                kills += 1
                next_kill = time.monotonic() + kill_every + rng.uniform(0, 1)
            if now >= next_look:
                done = sum(http.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"]
                           for cid in ids)
                next_look = now + 0.2
            time.sleep(0.01)
        applied_seconds = time.monotonic() - started
        if receiver.is_down:  # the chunks went faster than the outage
            time.sleep(max(0.0, outage - (time.monotonic() - (outage_at or 0.0))))
            receiver.up()

        def pending() -> int:
            return sum(len(http.get(f"/v1/comparisons/{cid}/deliveries").json()["deliveries"])
                       for cid in ids)

        while pending():
            assert time.monotonic() - started < timeout, "deliveries still waiting"
            time.sleep(0.2)
        delivered_seconds = time.monotonic() - started
        for thread in threads:
            thread.join(30)
        stop.set()
        return audit(http, ids, receiver, frames) | {
            "comparisons": comparisons, "chunks": chunks, "worker_kills": kills,
            "receiver_down_seconds": outage, "applied_seconds": applied_seconds,
            "delivered_seconds": delivered_seconds,
            "dead": sum(len(http.get(f"/v1/comparisons/{cid}/deliveries",
                                     params={"state": "dead"}).json()["deliveries"])
                        for cid in ids)}
    finally:
        receiver.down()
        deployment.stop()


def audit(http: httpx.Client, ids: list[str], receiver: Receiver,
          frames: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    events: dict[str, dict[str, Any]] = {}
    secrets: dict[str, str] = {}
    websocket_match = True
    for cid in ids:
        found = http.get(f"/v1/comparisons/{cid}/events", params={"limit": 1000}).json()
        events.update({e["id"]: e for e in found["events"]})
        secrets[cid] = http.get(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"]
        websocket_match &= (sorted(e["id"] for e in frames[cid])
                            == sorted(e["id"] for e in found["events"]))
        websocket_match &= all(e == events[e["id"]] for e in frames[cid])
    arrivals = Counter(headers[EVENT_ID_HEADER] for headers, _ in receiver.received)
    bad_signature = bad_body = 0
    for headers, body in receiver.received:
        event = json.loads(body)["event"]
        secret = secrets[event["comparison"]]
        bad_signature += not verify(secret, headers[SIGNATURE_HEADER], body, tolerance=3600)
        bad_body += event != events.get(headers[EVENT_ID_HEADER])
    # from an event's decision (the worker's clock, this machine's) to its first arrival
    first: dict[str, float] = {}
    for (headers, _), arrived in zip(receiver.received, receiver.arrived, strict=True):
        first.setdefault(headers[EVENT_ID_HEADER], arrived)
    latency = sorted(first[i] - events[i]["time"] for i in first if i in events)
    after_outage = [t - receiver.back_at for t in receiver.arrived
                    if receiver.back_at is not None and t >= receiver.back_at]
    return {
        "latency_seconds": {"median": latency[len(latency) // 2] if latency else None,
                            "max": latency[-1] if latency else None},
        "first_delivery_after_outage_seconds": min(after_outage, default=None),
        "events": len(events), "deliveries_received": len(receiver.received),
        "distinct_ids_received": len(arrivals),
        "missing": sorted(set(events) - set(arrivals)),
        "unknown": sorted(set(arrivals) - set(events)),
        "received_twice_or_more": sum(count > 1 for count in arrivals.values()),
        "bad_signatures": bad_signature, "bad_bodies": bad_body,
        "websocket_matches_events": websocket_match,
    }
