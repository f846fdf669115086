"""Redis clients from the one ``MODELCOMPARE_REDIS_URL``: a cluster client when the node it
names runs in cluster mode (``INFO cluster`` says ``cluster_enabled:1``), a plain one otherwise.

A cluster client does not require every slot to be served (``require_full_coverage=False``):
with a master down and no replica to take over, the comparisons on the other masters go on
(as far as the nodes allow it: ``cluster-require-full-coverage no``), and those on the dead
master fail with an error in ``UNAVAILABLE`` (503 at the API) until it returns.

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
from redis.asyncio.cluster import RedisCluster as _AsyncRedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster as _RedisCluster
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError


class ShardScript(Script):
    """A Lua script that a master lacking it (``NOSCRIPT``: it restarted, or never ran it) gets
    whole, by ``EVAL`` on the one master holding its keys. redis-py's own fallback,
    ``SCRIPT LOAD``, goes to every master, and fails while any one of them is down: the
    comparisons on the masters that are up would then fail too."""

    def __call__(self, keys: Any = (), args: Any = (), client: Any = None) -> Any:
        client = self.registered_client if client is None else client
        keys, args = tuple(keys), tuple(args)
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.script, len(keys), *keys, *args)


class AsyncShardScript(AsyncScript):
    """``ShardScript`` for the asyncio client."""

    async def __call__(self, keys: Any = (), args: Any = (), client: Any = None) -> Any:
        client = self.registered_client if client is None else client
        keys, args = tuple(keys), tuple(args)
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.script, len(keys), *keys, *args)


class RedisCluster(_RedisCluster):
    """redis-py's cluster client, its scripts loaded per master (``ShardScript``), and able to
    route commands whose keys move (``XREADGROUP``) while its default node is down."""

    def register_script(self, script: Any) -> Script:  # type: ignore[override]
        return ShardScript(self, script)

    def _get_command_keys(self, *args: Any) -> Any:
        # redis-py asks its default node (COMMAND GETKEYS) where the keys of such a command are;
        # with that node down, every such command failed, on whichever master its keys live.
        for _ in range(len(self.get_primaries())):
            try:
                return super()._get_command_keys(*args)
            except (redis.ConnectionError, redis.TimeoutError):
                self.replace_default_node()
        return super()._get_command_keys(*args)


class AsyncRedisCluster(_AsyncRedisCluster):
    """redis-py's asyncio cluster client, its scripts loaded per master (``ShardScript``)."""

    def register_script(self, script: Any) -> AsyncScript:  # type: ignore[override]
        return AsyncShardScript(self, script)


SyncClient = redis.Redis | RedisCluster
AsyncClient = aioredis.Redis | AsyncRedisCluster

# A Redis Cluster's "not now": a shard down (CLUSTERDOWN, a slot not covered), a failover under
# way (TRYAGAIN, MOVED/ASK redirections redis-py gave up following), no node reachable. As
# transient as a lost connection: the API answers 503, a worker skips that shard's comparisons.
CLUSTER_UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ClusterError,  # ClusterDownError, MasterDownError
    redis.exceptions.TryAgainError,
    redis.exceptions.AskError,  # MovedError too
    redis.exceptions.RedisClusterException,  # SlotNotCoveredError, "cannot be connected"
)
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    *CLUSTER_UNAVAILABLE,
)


# Every client's socket timeout, the default of the setting ``redis_socket_timeout``: a reply
# that takes longer counts as a lost connection. It is set here, not left to redis-py, whose
# default went from none to 5 s in version 8.
SOCKET_TIMEOUT = 10.0
# The longest a blocking command (BLPOP) may block: well under any socket timeout allowed
# (the setting's floor is twice this), or the wait itself would read as a lost connection.
BLOCK_MAX = 1.0


class UnsupportedRedis(RuntimeError):
    """The Redis found cannot run the service in the mode it is in."""


def cluster_enabled(url: str) -> bool:
    """Whether the node at ``url`` runs in cluster mode; a cluster of Redis older than 7 (no
    sharded pub/sub, ``SSUBSCRIBE``) raises ``UnsupportedRedis``."""
    probe = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
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
    socket_timeout: float = SOCKET_TIMEOUT  # seconds, for connecting and for each reply

    @classmethod
    def detect(cls, url: str, wait: float = 0.0,
               socket_timeout: float = SOCKET_TIMEOUT) -> Connection:
        """Ask the node at ``url``; while it is unreachable, retry for up to ``wait`` seconds
        (a process may start before Redis)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return cls(url, cluster_enabled(url), socket_timeout)
            except redis.ConnectionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def _timeouts(self, options: dict[str, Any]) -> dict[str, Any]:
        return {"socket_timeout": self.socket_timeout,
                "socket_connect_timeout": self.socket_timeout, **options}

    def sync_client(self, **options: Any) -> SyncClient:
        options = self._timeouts(options)
        if self.cluster:
            options.setdefault("require_full_coverage", False)
            return RedisCluster.from_url(_cluster_url(self.url), **options)
        return redis.Redis.from_url(self.url, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        options = self._timeouts(options)
        if self.cluster:
            options.setdefault("require_full_coverage", False)
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
                                                        retry=Retry(NoBackoff(), 1),
                                                        **self._timeouts({}))
        return aioredis.Redis(connection_pool=pool)


def is_cluster(client: SyncClient | AsyncClient) -> bool:
    return isinstance(client, _RedisCluster | _AsyncRedisCluster)


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

