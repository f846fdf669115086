"""Redis clients from the one ``MODELCOMPARE_REDIS_URL``: a cluster client when the node it
names runs in cluster mode (``INFO cluster`` says ``cluster_enabled:1``), a plain one otherwise.

Every multi-key script touches the keys of one comparison only (one ``{cmp:<id>}`` hash tag, so
one slot); global keys (the comparison index) are written by separate commands. In cluster mode
the per-comparison updates channel is a sharded channel (``SPUBLISH``/``SSUBSCRIBE``): its
messages stay on the shard that holds the comparison.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster

SyncClient = redis.Redis | RedisCluster
AsyncClient = aioredis.Redis | AsyncRedisCluster


class UnsupportedRedis(RuntimeError):
    """The Redis found cannot run the service in the mode it is in."""


def cluster_enabled(url: str) -> bool:
    """Whether the node at ``url`` runs in cluster mode; a cluster of Redis older than 7 (no
    sharded pub/sub, ``SSUBSCRIBE``) raises ``UnsupportedRedis``."""
    probe = redis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        if int(probe.info("cluster").get("cluster_enabled", 0)) != 1:
            return False
        version = str(probe.info("server").get("redis_version", "0"))
    finally:
        probe.close()
    if int(version.split(".")[0]) < 7:
        raise UnsupportedRedis(
            f"the Redis Cluster node at {url} runs Redis {version}; cluster mode needs Redis 7 "
            "or later (sharded pub/sub)"
        )
    return True


@dataclass(frozen=True)
class Connection:
    """Where Redis is and whether it is a cluster; makes the clients the processes use."""

    url: str
    cluster: bool

    @classmethod
    def detect(cls, url: str, wait: float = 0.0) -> Connection:
        """Ask the node at ``url``; while it is unreachable, retry for up to ``wait`` seconds
        (a process may start before Redis)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return cls(url, cluster_enabled(url))
            except redis.ConnectionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def sync_client(self, **options: Any) -> SyncClient:
        if self.cluster:
            return RedisCluster.from_url(_cluster_url(self.url), **options)
        return redis.Redis.from_url(self.url, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        if self.cluster:
            return AsyncRedisCluster.from_url(_cluster_url(self.url), **options)
        return aioredis.Redis.from_url(self.url, **options)

    def pooled_async_client(self, size: int, timeout: float) -> AsyncClient:
        """The API's client: at most ``size`` connections (per node in a cluster). On one node
        a request waits up to ``timeout`` seconds for a free connection instead of failing at
        once (``BlockingConnectionPool``); the cluster client has no waiting pool.

        A pooled connection left stale by a Redis restart is only found out when a command
        fails on it (the pool's readiness check sees no EOF yet), so a command that fails to
        connect is sent once more on a fresh connection; a Redis that is down still fails at
        once (503). redis-py's own clients, the workers' included, retry the same way."""
        if self.cluster:
            return self.async_client(max_connections=size)
        pool = aioredis.BlockingConnectionPool.from_url(self.url, max_connections=size,
                                                        timeout=timeout,
                                                        retry=Retry(NoBackoff(), 1))
        return aioredis.Redis(connection_pool=pool)


def is_cluster(client: SyncClient | AsyncClient) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def publish_command(client: SyncClient | AsyncClient) -> str:
    """How a comparison's updates are published: sharded in a cluster, plain on one node (a
    Redis 6 node has no ``SPUBLISH``)."""
    return "SPUBLISH" if is_cluster(client) else "PUBLISH"


def _cluster_url(url: str) -> str:
    """A cluster has database 0 only: ``redis://host:port/0`` is accepted, the path dropped."""
    address, question, query = url.partition("?")
    scheme, _, rest = address.partition("://")
    location, _, database = rest.partition("/")
    if database not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0, not {database!r} ({url})")
    return f"{scheme}://{location}{question}{query}"
