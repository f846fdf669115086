"""Crash safety, end to end: while 480 chunks stream into two comparisons, workers are SIGKILLed
at random moments (and replaced), redis-server is SIGKILLed and restarted from its append-only
file (``appendfsync always``), and the API process is killed and restarted. Clients retry with
idempotency keys until they get a 2xx. Afterwards every acknowledged chunk was applied exactly
once and in order, and states, evidence and trace are bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import redis
import torch
from fault_processes import Deployment

from modelcompare.estimators import state_to_bytes
from modelcompare.service.engine import runner_for
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.codec import decode_block, encode_block
from modelcompare.service.store.history import BlockHistory
from modelcompare.service.store.keys import GROUP, Keys
from modelcompare.service.store.trace import decode_point

CHUNKS, ROWS = 240, 5
MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "wrong_noise", "family": "linear_regression", "config": {"dim": 3, "noise_std": 3.0}},
]
SGAIS = {"method": "sgais", "particles": 16, "steps": 2, "hmc_moves": 1, "leapfrog_steps": 5,
         "full_batch_rows": 100}


def stream(seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(CHUNKS * ROWS, 4))
    y = x[:, :3] @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(size=CHUNKS * ROWS)
    return [{"x": x[i : i + ROWS].tolist(), "y": y[i : i + ROWS].tolist()}
            for i in range(0, CHUNKS * ROWS, ROWS)]


@dataclass
class Feeder:
    """Posts chunks in order, each with its own Idempotency-Key, retrying until a 2xx."""

    url: str
    cid: str
    chunks: list[dict[str, Any]]
    pause: float
    sequences: list[int] = field(default_factory=list)  # acknowledged sequence of each chunk
    retries: int = 0
    duplicates: int = 0  # retries the API answered from the idempotency record

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            for index, chunk in enumerate(self.chunks):
                self.sequences.append(self.post(client, index, chunk))
                time.sleep(self.pause)

    def post(self, client: httpx.Client, index: int, chunk: dict[str, Any]) -> int:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                response = client.post(f"/v1/comparisons/{self.cid}/chunks", json=chunk,
                                       headers={"Idempotency-Key": f"chunk-{index}"})
            except httpx.TransportError:
                response = None
            if response is not None and response.is_success:
                body = response.json()
                self.duplicates += bool(body["duplicate"])
                return int(body["sequence"])
            assert response is None or response.status_code >= 500, response.text
            self.retries += 1
            time.sleep(0.1)
        raise TimeoutError(f"chunk {index} was never acknowledged")


def replay(spec: ComparisonSpec, blocks: list[bytes]) -> tuple[dict[str, bytes], list[Any]]:
    """The uninterrupted run: every model through every block in one process."""
    torch.set_num_threads(1)
    runners = [runner_for(spec, model) for model in spec.models]
    states = {r.name: r.init_state() for r in runners}
    history = BlockHistory(spec.x_dim, spec.has_y)
    trace = []
    for sequence, block in enumerate(blocks, start=1):
        rows = decode_block(block)
        point = {}
        for runner in runners:
            states[runner.name], _ = runner.update(states[runner.name], rows,
                                                   history.prefix(sequence - 1), sequence)
            point[runner.name] = runner.reading(states[runner.name], None).log_evidence
        history.append(rows)
        trace.append(point)
    return {name: state_to_bytes(state) for name, state in states.items()}, trace


def wait_applied(store: redis.Redis, keys: Keys, sequence: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while int(store.hget(keys.meta, "sequence") or 0) < sequence:
        assert time.monotonic() < deadline, "the workers did not apply every chunk"
        time.sleep(0.1)


def test_kills_lose_nothing_and_apply_each_chunk_once(deployment: Deployment) -> None:
    rng = random.Random(20261122)
    bodies = [{"name": "chaos-sgais", "seed": 7, "models": MODELS, "x_dim": 4, "estimator": SGAIS},
              {"name": "chaos-exact", "seed": 0, "models": MODELS, "x_dim": 4,
               "estimator": {"method": "exact"}}]
    with httpx.Client(base_url=deployment.api.url, timeout=30) as client:
        cids = [client.post("/v1/comparisons", json=body).json()["id"] for body in bodies]
    feeders = [Feeder(deployment.api.url, cid, stream(seed), pause=0.05)
               for seed, cid in enumerate(cids)]
    threads = [threading.Thread(target=f.run) for f in feeders]
    for thread in threads:
        thread.start()
    faults = ["worker", "redis", "worker", "api", "worker", "worker", "redis", "worker"]
    for fault in faults:
        time.sleep(rng.uniform(0.8, 2.5))
        if fault == "worker":
            deployment.kill_worker(rng)
        elif fault == "redis":
            deployment.restart_redis()
        else:
            deployment.restart_api()
    for thread in threads:
        thread.join(timeout=300)
    assert deployment.kills == {"worker": 5, "redis": 2, "api": 1}

    store = redis.Redis.from_url(deployment.redis.url)
    for feeder in feeders:
        # Acknowledged in order, once each: chunk i got sequence i + 1, retries included.
        assert feeder.sequences == list(range(1, CHUNKS + 1))
        keys = Keys(deployment.prefix, feeder.cid)
        wait_applied(store, keys, CHUNKS, timeout=120)
        meta = store.hgetall(keys.meta)
        assert int(meta[b"next_seq"]) == int(meta[b"sequence"]) == CHUNKS  # nothing extra
        blocks = store.lrange(keys.blocks, 0, -1)
        expected = [encode_block(np.array(c["x"]), np.array(c["y"])) for c in feeder.chunks]
        assert blocks == expected  # every acknowledged chunk applied once, in order
        assert store.xlen(keys.stream) == 0 and store.xpending(keys.stream, GROUP)["pending"] == 0
        assert store.xlen(keys.dead_letters) == 0

        spec = ComparisonSpec.model_validate_json(meta[b"spec"])
        states, trace = replay(spec, blocks)
        assert dict(store.hgetall(keys.states)) == {k.encode(): v for k, v in states.items()}
        stored_trace = [decode_point(p) for p in store.lrange(keys.trace, 0, -1)]
        assert [p["sequence"] for p in stored_trace] == list(range(1, CHUNKS + 1))
        assert [{n: m["log_evidence"] for n, m in p["models"].items()} for p in stored_trace] == (
            trace)
        evidence = json.loads(store.get(keys.evidence))
        assert evidence["status"] == "ok" and evidence["n_observations"] == CHUNKS * ROWS
        assert {m["name"]: m["log_evidence"] for m in evidence["models"]} == trace[-1]
        # Idempotency records survived the restarts: re-sent chunks are recognised, not queued.
        answered = feeder.duplicates
        with httpx.Client(base_url=deployment.api.url, timeout=30) as client:
            for index in (0, CHUNKS - 1):
                assert feeder.post(client, index, feeder.chunks[index]) == index + 1
        assert feeder.duplicates == answered + 2
        assert int(store.hget(keys.meta, "next_seq")) == CHUNKS
        applied = [p["sequence"] for p in stored_trace]
        print(f"\n{spec.estimator['method']}: kills {deployment.kills}; acknowledged "
              f"{len(feeder.sequences)}, applied {len(applied)}, applied twice "
              f"{len(applied) - len(set(applied))}; client retries {feeder.retries}, answered "
              f"from idempotency records {feeder.duplicates}")
