"""A real uvicorn server in a thread on real Redis, and workers driven by hand, for the tests."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import redis
import uvicorn
from service_helpers import chunks, regression_data

from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings
from modelcompare.service.store.connection import Connection, SyncClient
from modelcompare.service.store.keys import Keys, index_key
from modelcompare.service.worker import Worker

LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_redis_available() -> bool:
    try:
        return bool(redis.Redis.from_url(LOCAL_REDIS, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def delete_prefix(url: str, prefix: str) -> None:
    """Remove only this test's keys from a shared server (never FLUSHALL)."""
    client = Connection.detect(url).sync_client()
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:  # one by one: in a cluster, keys of several comparisons are on several nodes
        pipe.delete(key)
    pipe.execute()
    client.close()


@dataclass
class Server:
    url: str
    settings: Settings
    redis_url: str  # where the server's Redis is reachable from the test

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)

    def redis(self) -> SyncClient:
        return Connection.detect(self.redis_url).sync_client()

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://")


class PromptServer(uvicorn.Server):
    """uvicorn's server with a main loop that looks for ``should_exit`` every ``TICK`` seconds
    instead of every 0.1 s: each of the fast loop's ~130 server teardowns waited ~0.09 s there."""

    TICK = 0.005

    async def main_loop(self) -> None:
        ticks = 0
        while not await self.on_tick(ticks):  # on_tick refreshes the Date header every 10th
            ticks = (ticks + 1) % 864_000
            await asyncio.sleep(self.TICK)


class RunningServer:
    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        port = free_port()
        self.server = PromptServer(
            uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning",
                           ws="websockets-sansio")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.handle = Server(f"http://127.0.0.1:{port}", settings, self.app.state.redis_url)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


StartServer = Callable[..., Server]


def make_worker(server: Server, name: str, **overrides: Any) -> Worker:
    """A worker on the server's Redis that the test drives itself (short lease)."""
    settings = Settings(key_prefix=server.settings.key_prefix, lease_ttl=0.5,
                        poll_interval=0.05, **overrides)
    return Worker(server.redis(), settings, consumer=name)


def create_and_ingest(client: httpx.Client, body: dict[str, Any], rows: int, size: int,
                      seed: int = 0) -> str:
    x, y = regression_data(rows, seed=seed)
    cid = str(client.post("/v1/comparisons", json=body).json()["id"])
    for chunk in chunks(x, y, size):
        assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
    return cid


def drain(worker: Worker, store: SyncClient, keys: Keys, sequence: int) -> None:
    """Run ``worker`` until the comparison has applied ``sequence`` chunks."""
    deadline = time.monotonic() + 180
    while int(store.hget(keys.meta, "sequence")) < sequence:
        assert time.monotonic() < deadline, "the worker did not finish"
        if not worker.run_once():
            time.sleep(0.05)


def run_until_applied(workers: list[Worker], store: SyncClient, keys: Keys, sequence: int,
                      timeout: float) -> None:
    """Run ``workers`` in threads, as ``Worker.run`` serves in production, until the comparison
    has applied ``sequence`` chunks (within ``timeout`` seconds); then stop and join them."""
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + timeout
        while int(store.hget(keys.meta, "sequence")) < sequence:
            assert time.monotonic() < deadline, "the workers did not finish"
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def states(store: SyncClient, keys: Keys) -> dict[bytes, bytes]:
    return dict(store.hgetall(keys.states))


def snapshot(server: Server, cid: str) -> dict[str, Any]:
    """Everything stored about one comparison (and the index), to compare before and after."""
    store = server.redis()
    keys = Keys(server.settings.key_prefix, cid)
    return {
        "meta": store.hgetall(keys.meta),
        "evidence": store.get(keys.evidence),
        "stream": store.xlen(keys.stream),
        "blocks": store.llen(keys.blocks),
        "states": store.hgetall(keys.states),
        "keys": sorted(store.scan_iter(match=keys.pattern)),
        "index": store.smembers(index_key(server.settings.key_prefix)),
    }
