"""Recovery of a comparison whose lease holder dies: the harness shared by
test_faults_recovery.py and benchmarks/recovery.py.

A comparison with a backlog of chunks is served by two worker processes. A trial kills the
worker that holds its lease (or redis-server, restarted from its AOF) and times the next commit.
``audit`` then checks every chunk was applied once, in order, to the states of a clean run
made by the deployment's own code (a baseline checkout's, in benchmarks/recovery.py).
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import redis
from fault_processes import Deployment, WorkerProcess, packages

from modelcompare.service.store.codec import encode_block
from modelcompare.service.store.keys import GROUP, Keys
from modelcompare.service.store.trace import decode_point

MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
]
SGAIS = {"method": "sgais", "particles": 64, "steps": 8, "hmc_moves": 4, "leapfrog_steps": 10,
         "full_batch_rows": 100}


def chunks(count: int, rows: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count * rows, 4))
    y = x[:, :3] @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(size=count * rows)
    return [{"x": x[i : i + rows].tolist(), "y": y[i : i + rows].tolist()}
            for i in range(0, count * rows, rows)]


# ``test_faults_chaos.replay`` in a checkout's own code: spec and base64 blocks in, states out
REPLAY_IN_CHECKOUT = """
import base64, json, sys
sys.path.insert(0, "tests/faults")
from test_faults_chaos import replay
given = json.load(sys.stdin)
states, _ = replay(ComparisonSpec.model_validate_json(given["spec"]),
                   [base64.b64decode(block) for block in given["blocks"]])
json.dump({name: base64.b64encode(state).decode() for name, state in states.items()}, sys.stdout)
"""


def clean_states(root: Path, spec: bytes, blocks: list[bytes]) -> dict[str, bytes]:
    """The states of an uninterrupted run over ``blocks``, made by the code of checkout
    ``root`` in a process of its own: a baseline's workers write its estimators' states, which
    this checkout's need not reproduce bit for bit (one path for this checkout and a baseline,
    so the tests run the one the benchmark's baseline takes)."""
    given = json.dumps({"spec": spec.decode(),
                        "blocks": [base64.b64encode(b).decode() for b in blocks]})
    done = subprocess.run(
        [sys.executable, "-c",
         f"from {packages(root)}service.schemas import ComparisonSpec\n{REPLAY_IN_CHECKOUT}"],
        cwd=root, check=True, capture_output=True, text=True, input=given,
    )
    return {name: base64.b64decode(state) for name, state in json.loads(done.stdout).items()}


def busiest(workers: list[WorkerProcess], seconds: float = 0.3) -> WorkerProcess | None:
    """The worker that used the most CPU over ``seconds`` (the one computing an update)."""
    running = {w: psutil.Process(w.process.pid) for w in workers if w.process is not None}
    before = {w: sum(p.cpu_times()[:2]) for w, p in running.items()}
    time.sleep(seconds)
    used = {w: sum(p.cpu_times()[:2]) - before[w] for w, p in running.items()}
    top = max(used, key=lambda w: used[w], default=None)
    return top if top is not None and used[top] > seconds / 4 else None


class Scenario:
    """One comparison under test on a running deployment; ``feed`` queues more chunks."""

    def __init__(self, deployment: Deployment, seed: int = 5) -> None:
        self.deployment = deployment
        self.http = httpx.Client(base_url=deployment.api.url, timeout=30)
        body = {"name": "recovery", "seed": seed, "models": MODELS, "x_dim": 4,
                "estimator": SGAIS}
        self.cid = str(self.http.post("/v1/comparisons", json=body).json()["id"])
        self.keys = Keys(deployment.prefix, self.cid)
        self.sent: list[dict[str, Any]] = []
        self.rng = random.Random(seed)

    def store(self) -> redis.Redis:
        return redis.Redis.from_url(self.deployment.redis.url)

    def feed(self, count: int, rows: int = 50) -> None:
        for chunk in chunks(count, rows, seed=len(self.sent)):
            response = self.http.post(f"/v1/comparisons/{self.cid}/chunks", json=chunk)
            assert response.status_code == 202, response.text
            self.sent.append(chunk)

    def applied(self) -> int:
        return int(self.store().hget(self.keys.meta, "sequence") or 0)

    def holder(self) -> WorkerProcess | None:
        """The worker process holding the lease now: the pid in its consumer name, or for a
        worker whose name has none (the code before leases were fast), the busiest worker."""
        token = self.store().get(self.keys.lease)
        if token is None:
            return None
        pid = token.decode().split("-")[-2]
        if not pid.isdigit():
            return busiest(self.deployment.workers)
        return next((w for w in self.deployment.workers
                     if w.process is not None and w.process.pid == int(pid)), None)

    def wait_commit(self, after: int, timeout: float) -> float:
        """Seconds until the applied sequence passes ``after`` (polled every 10 ms)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                if self.applied() > after:
                    return time.monotonic() - started
            except redis.ConnectionError:
                pass
            time.sleep(0.01)
        raise TimeoutError(f"no commit after {after} in {timeout} s")

    def busy_holder(self, backlog: int = 80) -> WorkerProcess:
        """A worker holding the lease at a random point of its work (0.05 to 0.7 s in: any
        phase of its renewals, every lease_ttl / 3), with chunks still queued."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(self.sent) - self.applied() < backlog:
                self.feed(backlog)
            holder = self.holder()
            time.sleep(self.rng.uniform(0.05, 0.7))
            if holder is not None and holder is self.holder() and (
                    len(self.sent) - self.applied() >= 2):
                return holder
        raise TimeoutError("no worker took the lease")

    def kill_holder(self, timeout: float = 60) -> float:
        """SIGKILL the lease holder mid-batch; seconds from the kill to the next commit. The
        killed worker is started again afterwards, so the next trial has two workers again."""
        holder = self.busy_holder()
        before = self.applied()
        holder.kill()
        seconds = self.wait_commit(before, timeout)
        holder.start()
        return seconds

    def restart_redis(self, timeout: float = 60) -> tuple[float, bool]:
        """SIGKILL redis-server while the lease is held and start it from its AOF; seconds
        from Redis being back to the next commit, and whether the lease survived the restart
        (the holder releases it between batches: a kill in that gap finds none to keep)."""
        self.busy_holder()
        while self.store().get(self.keys.lease) is None:
            self.busy_holder()
        self.deployment.redis.kill()
        self.deployment.redis.start()
        before = self.applied()
        survived = self.store().get(self.keys.lease) is not None
        return self.wait_commit(before, timeout), survived

    def audit(self, timeout: float = 300) -> dict[str, Any]:
        """Every chunk sent applied exactly once, in order, to a clean run's states."""
        store = self.store()
        deadline = time.monotonic() + timeout
        while self.applied() < len(self.sent):
            assert time.monotonic() < deadline, "the workers did not apply every chunk"
            time.sleep(0.1)
        meta = store.hgetall(self.keys.meta)
        blocks = store.lrange(self.keys.blocks, 0, -1)
        expected = [encode_block(np.array(c["x"]), np.array(c["y"])) for c in self.sent]
        states = clean_states(self.deployment.root, meta[b"spec"], blocks)
        trace = [decode_point(p)["sequence"] for p in store.lrange(self.keys.trace, 0, -1)]
        return {
            "sent": len(self.sent),
            "applied": int(meta[b"sequence"]),
            "in_order_once": blocks == expected and trace == list(range(1, len(self.sent) + 1)),
            "pending": store.xpending(self.keys.stream, GROUP)["pending"],
            "bit_identical": dict(store.hgetall(self.keys.states))
            == {k.encode(): v for k, v in states.items()},
        }
