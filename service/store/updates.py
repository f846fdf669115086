"""The published evidence updates, as an API process receives them (the Redis side of
``modelcompare.service.api.broadcast``).

On one node: one pattern subscription per API process. In a Redis Cluster the updates are
published on sharded channels (they stay on the comparison's shard), which take no patterns: the
process subscribes to the channel of each comparison it has local subscribers for, and, once
subscribed, reads the comparison's evidence afresh, so an update published before the
subscription took effect is not missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPubSub
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException

from modelcompare.service.store.connection import AsyncClient, is_cluster
from modelcompare.service.store.keys import Keys, comparison_id_from_channel, updates_pattern

log = logging.getLogger("modelcompare.broadcast")


class Listener(Protocol):
    """Where the updates go: ``ready`` is set once subscribed, ``changed`` whenever the set of
    ``followed`` comparisons changes; ``deliver`` takes one update (its JSON)."""

    ready: asyncio.Event
    changed: asyncio.Event

    def followed(self) -> set[str]: ...

    def deliver(self, cid: str, data: bytes) -> None: ...


class UpdateFeed:
    def __init__(self, client: AsyncClient, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        # cluster: comparisons whose master did not answer -> loop time to try again; the others
        # are followed meanwhile (one dead master must not cut every comparison's updates)
        self._deferred: dict[str, float] = {}

    async def relay(self, listener: Listener) -> None:
        """Deliver updates to ``listener`` until cancelled, resubscribing after a lost
        connection."""
        if is_cluster(self._client):
            await self._relay_sharded(listener)
            return
        while True:
            try:
                pubsub = self._client.pubsub()
                await pubsub.psubscribe(updates_pattern(self._prefix))
                listener.ready.set()
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        channel = message["channel"].decode()
                        listener.deliver(comparison_id_from_channel(channel), message["data"])
            except (aioredis.ConnectionError, OSError) as exc:
                log.warning("pub/sub connection lost: %s", exc)
                await asyncio.sleep(0.5)

    async def _relay_sharded(self, listener: Listener) -> None:
        assert isinstance(self._client, AsyncRedisCluster)
        while True:
            pubsub = self._client.pubsub()
            try:
                await self._client.initialize()  # the slot map: SSUBSCRIBE needs it first
                active: set[str] = set()
                listener.ready.set()
                while True:
                    listener.changed.clear()  # before _follow reads the followed: none missed
                    await self._follow(pubsub, active, listener)
                    if not active:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(listener.changed.wait(), 1.0)
                        continue
                    message = await pubsub.get_sharded_message(ignore_subscribe_messages=True,
                                                               timeout=0.05)
                    if message is not None and message["type"] in ("smessage", b"smessage"):
                        channel = message["channel"].decode()
                        listener.deliver(comparison_id_from_channel(channel), message["data"])
            except (aioredis.RedisError, OSError) as exc:
                log.warning("sharded pub/sub connection lost: %s", exc)
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(aioredis.RedisError, OSError):
                    await pubsub.aclose()

    async def _follow(self, pubsub: ClusterPubSub, active: set[str], listener: Listener) -> None:
        """Subscribe to the channels of the comparisons followed, and only those."""
        wanted = listener.followed()
        now = asyncio.get_running_loop().time()
        for cid in sorted(wanted - active):
            keys = Keys(self._prefix, cid)
            if self._deferred.get(cid, 0.0) > now or not await self._answers(keys.updates):
                continue
            await pubsub.ssubscribe(keys.updates)
            active.add(cid)
            current = await self._client.get(keys.evidence)
            if current is not None:
                listener.deliver(cid, current)
        for cid in sorted(active - wanted):
            await pubsub.sunsubscribe(Keys(self._prefix, cid).updates)
            active.discard(cid)

    async def _answers(self, channel: str) -> bool:
        """Whether the master of ``channel``'s slot answers; if not, the comparison is tried
        again in a second (its subscribers get nothing meanwhile: it cannot change)."""
        assert isinstance(self._client, AsyncRedisCluster)
        cid = comparison_id_from_channel(channel)
        try:
            node = self._client.get_node_from_key(channel)
            await asyncio.wait_for(self._client.execute_command("PING", target_nodes=node), 1.0)
        except (TimeoutError, aioredis.RedisError, RedisClusterException, OSError) as exc:
            self._deferred[cid] = asyncio.get_running_loop().time() + 1.0
            log.debug("comparison %s: its master is unavailable (%s)", cid, exc)
            return False
        self._deferred.pop(cid, None)
        return True
