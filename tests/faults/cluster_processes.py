"""A Redis Cluster of real redis-server processes to break: every node keeps an append-only file
(``appendfsync always``) and can be SIGKILLed and started again on its port from its AOF and
``nodes.conf``. Used by tests/service/store/test_cluster_failures.py and
benchmarks/cluster_failover.py.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from fault_processes import ApiServer, Child, WorkerProcess, service_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
from redis_cluster import free_node_ports, redis7


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2)


class ClusterNode(Child):
    """One ``redis-server --cluster-enabled yes`` with AOF ``always``, on a fixed port."""

    what = "a cluster node"

    def __init__(self, folder: Path, port: int, node_timeout_ms: int,
                 options: tuple[str, ...] = ()) -> None:
        self.folder = folder
        self.port = port
        self.node_timeout_ms = node_timeout_ms
        self.options = options
        folder.mkdir(parents=True, exist_ok=True)

    def launch(self) -> None:
        self.process = subprocess.Popen(
            [redis7("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms),
             "--cluster-replica-validity-factor", "0", "--dir", str(self.folder),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--logfile", str(self.folder / "redis.log"), *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def exit_details(self) -> str:
        log = self.folder / "redis.log"
        lines = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
        return ": " + " | ".join(lines) if lines else ""

    def ready(self) -> bool:
        client = _node(self.port)
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
        finally:
            client.close()


class DurableCluster:
    """``masters`` masters with ``replicas`` replicas each, created with ``redis-cli --cluster
    create``. ``full_coverage`` is the nodes' ``cluster-require-full-coverage``."""

    def __init__(self, folder: Path, masters: int = 3, replicas: int = 0,
                 node_timeout_ms: int = 1000, full_coverage: bool = True) -> None:
        self.node_timeout_ms = node_timeout_ms
        options = ("--cluster-require-full-coverage", "yes" if full_coverage else "no")
        self.nodes = {port: ClusterNode(folder / str(port), port, node_timeout_ms, options)
                      for port in free_node_ports(masters * (1 + replicas))}
        self.replicas = replicas

    def start(self) -> None:
        try:
            for node in self.nodes.values():
                node.launch()
            for node in self.nodes.values():
                node.wait_ready(30)
            subprocess.run(
                [redis7("redis-cli"), "--cluster", "create",
                 *(f"127.0.0.1:{p}" for p in self.nodes), "--cluster-replicas",
                 str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )
            wait_for(self.healthy, "the cluster did not become healthy")
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """Any one live node: the service finds the rest."""
        return f"redis://127.0.0.1:{self.live_ports()[0]}/0"

    def live_ports(self) -> list[int]:
        return [p for p, n in self.nodes.items() if n.process is not None
                and n.process.poll() is None]

    def state(self, port: int) -> str:
        return str(_node(port).cluster("info")["cluster_state"])

    def healthy(self) -> bool:
        return all(self.state(p) == "ok" for p in self.live_ports()) and all(
            _covered(p) for p in self.live_ports())

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot (as a live node sees it)."""
        client = _node(self.live_ports()[0])
        slot = int(client.cluster("keyslot", key))
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise LookupError(slot)

    def wait_for_replicas(self, master: int) -> None:
        """Until the replicas of ``master`` have every write it acknowledged (``WAIT``)."""
        _node(master).execute_command("WAIT", self.replicas, 10_000)

    def kill(self, port: int) -> None:
        self.nodes[port].kill()

    def restart(self, port: int) -> None:
        """Start a killed node again from its AOF and nodes.conf, on its port."""
        self.nodes[port].start()

    def wait_until(self, condition: Callable[[], object], message: str,
                   timeout: float = 30) -> None:
        wait_for(condition, message, timeout)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()


def _covered(port: int) -> bool:
    info = _node(port).cluster("info")
    return int(info["cluster_slots_ok"]) == 16384


def wait_for(condition: Callable[[], object], message: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(message)
        time.sleep(0.05)


# What the scenarios send: 2 linear regressions, exact evidence (fast), 10-row chunks.
MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
]
ROWS = 10


def chunk(rng_seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    x = rng.normal(size=(ROWS, 3))
    return {"x": x.tolist(), "y": (x @ [1.0, -0.5, 0.25] + rng.normal(size=ROWS)).tolist()}


@dataclass
class Tally:
    """Answers by route and status; transport failures (dropped connections, timeouts)."""

    statuses: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)
    dropped: collections.Counter[str] = field(default_factory=collections.Counter)
    bodies_500: list[str] = field(default_factory=list)
    seconds_503: list[float] = field(default_factory=list)  # how long each 503 took

    def count(self, route: str, status: int, body: str, seconds: float = 0.0) -> None:
        self.statuses[(route, status)] += 1
        if status == 503:
            self.seconds_503.append(seconds)
        if status >= 500 and status != 503:
            self.bodies_500.append(f"{route}: {body[:300]}")

    def of(self, status: int) -> int:
        return sum(n for (_, s), n in self.statuses.items() if s == status)


class ClusterDeployment:
    """A ``DurableCluster``, one ``modelcompare serve`` and ``workers`` ``modelcompare worker``
    processes on it; comparisons created and fed through the API, every chunk with an
    ``Idempotency-Key`` so that a chunk answered 503 can be sent again."""

    def __init__(self, folder: Path, replicas: int = 0, full_coverage: bool = False,
                 node_timeout_ms: int = 1000, workers: int = 1) -> None:
        self.cluster = DurableCluster(folder / "cluster", replicas=replicas,
                                      node_timeout_ms=node_timeout_ms,
                                      full_coverage=full_coverage)
        self.workers_count = workers
        self.api: ApiServer | None = None
        self.workers: list[WorkerProcess] = []
        self.http: httpx.Client | None = None
        self.accepted: dict[str, dict[str, int]] = collections.defaultdict(dict)  # cid: key->seq
        self.unsure: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
        self.seed = 0

    def start(self) -> None:
        self.cluster.start()
        env = service_env(self.cluster.url, f"cf-{uuid.uuid4().hex[:6]}", poll_interval=0.1,
                          lease_ttl=1.0)
        self.api = ApiServer(env)
        self.workers = [WorkerProcess(env) for _ in range(self.workers_count)]
        try:
            for child in (self.api, *self.workers):
                child.launch()
            for child in (self.api, *self.workers):
                child.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.http = httpx.Client(base_url=self.api.url, timeout=30)

    @property
    def ws_url(self) -> str:
        assert self.api is not None
        return f"ws://127.0.0.1:{self.api.port}"

    def create(self, count: int) -> list[str]:
        assert self.http is not None
        ids = []
        for i in range(count):
            reply = self.http.post("/v1/comparisons", json={
                "name": f"c{i}", "models": MODELS, "estimator": {"method": "exact"}})
            reply.raise_for_status()
            ids.append(reply.json()["id"])
        return ids

    def master_of(self, cid: str) -> int:
        return self.cluster.master_of(f"{{cmp:{cid}}}")

    def post_chunk(self, cid: str, tally: Tally | None = None) -> int | None:
        """One chunk under a fresh Idempotency-Key; its status (None: the connection dropped).
        A 202 is recorded as acknowledged, anything else as to be sent again."""
        assert self.http is not None
        self.seed += 1
        key, body = f"k{self.seed}", chunk(self.seed)
        status = self._send(cid, key, body, tally)
        if status != 202:
            self.unsure[cid][key] = body
        return status

    def _send(self, cid: str, key: str, body: dict[str, Any], tally: Tally | None) -> int | None:
        assert self.http is not None
        started = time.monotonic()
        try:
            reply = self.http.post(f"/v1/comparisons/{cid}/chunks", json=body,
                                   headers={"Idempotency-Key": key})
        except httpx.TransportError as exc:
            if tally is not None:
                tally.dropped[type(exc).__name__] += 1
            return None
        if tally is not None:
            tally.count("POST chunks", reply.status_code, reply.text, time.monotonic() - started)
        if reply.status_code == 202:
            self.accepted[cid][key] = int(reply.json()["sequence"])
        return reply.status_code

    def resend_unsure(self) -> None:
        """Send again, under their keys, the chunks not answered 202 (a client's retries)."""
        for cid, pending in self.unsure.items():
            for key, body in list(pending.items()):
                if self._send(cid, key, body, None) == 202:
                    del pending[key]

    def get(self, route: str, path: str, tally: Tally) -> int | None:
        assert self.http is not None
        started = time.monotonic()
        try:
            reply = self.http.get(path)
        except httpx.TransportError as exc:
            tally.dropped[type(exc).__name__] += 1
            return None
        tally.count(route, reply.status_code, reply.text, time.monotonic() - started)
        return reply.status_code

    def mixed_round(self, ids: list[str], tally: Tally) -> None:
        """One request of each kind per comparison, and the comparison-wide routes."""
        self.get("GET /readyz", "/readyz", tally)
        self.get("GET list", "/v1/comparisons", tally)
        for cid in ids:
            self.post_chunk(cid, tally)
            self.get("GET evidence", f"/v1/comparisons/{cid}/evidence", tally)
            self.get("GET comparison", f"/v1/comparisons/{cid}", tally)
            self.get("GET history", f"/v1/comparisons/{cid}/history", tally)

    def evidence(self, cid: str) -> dict[str, Any]:
        assert self.http is not None
        reply = self.http.get(f"/v1/comparisons/{cid}/evidence")
        reply.raise_for_status()
        return dict(reply.json())

    def readyz(self) -> tuple[int, str]:
        assert self.api is not None
        reply = httpx.get(f"{self.api.url}/readyz", timeout=30)  # any thread
        return reply.status_code, reply.text

    def watch_readyz(self, every: float = 0.25) -> ReadyzWatch:
        """/readyz polled in a thread of its own until the watch is stopped."""
        return ReadyzWatch(self, every)

    def audit(self, ids: list[str], timeout: float = 60) -> dict[str, Any]:
        """Once every acknowledged chunk is applied (or ``timeout``): per comparison the chunks
        acknowledged, the sequence applied and the rows in the evidence."""
        deadline = time.monotonic() + timeout
        while True:
            found = {cid: self.evidence(cid) for cid in ids}
            done = all(found[cid]["sequence"] >= max(self.accepted[cid].values(), default=0)
                       for cid in ids)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        acknowledged = sum(len(self.accepted[cid]) for cid in ids)
        applied = sum(int(found[cid]["sequence"]) for cid in ids)
        rows = sum(int(found[cid]["n_observations"]) for cid in ids)
        distinct = all(sorted(self.accepted[cid].values())
                       == list(range(1, len(self.accepted[cid]) + 1)) for cid in ids)
        return {"acknowledged": acknowledged, "applied": applied, "rows": rows,
                "rows_expected": acknowledged * ROWS, "sequences_distinct": distinct,
                "lost": acknowledged - applied if applied <= acknowledged else 0,
                "extra": applied - acknowledged if applied > acknowledged else 0}

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        for child in (*self.workers, self.api):
            if child is not None:
                child.kill()
        self.cluster.stop()


class ReadyzWatch:
    """``/readyz`` every ``every`` seconds in a thread: (seconds since start, status, body)."""

    def __init__(self, deployment: ClusterDeployment, every: float) -> None:
        import threading

        self.started = time.monotonic()
        self.answers: list[tuple[float, int, str]] = []
        self._stop = threading.Event()

        def poll() -> None:
            while not self._stop.is_set():
                try:
                    status, body = deployment.readyz()
                except httpx.TransportError as exc:
                    status, body = 0, type(exc).__name__
                self.answers.append((time.monotonic() - self.started, status, body))
                self._stop.wait(every)

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, int, str]]:
        self._stop.set()
        self._thread.join()
        return self.answers
