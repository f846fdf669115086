"""Relays published evidence updates to this process's websockets and waiting requests.

On one node: one pattern subscription per API process. In a Redis Cluster the updates are
published on sharded channels (they stay on the comparison's shard), which take no patterns: the
process subscribes to the channel of each comparison it has local subscribers for, and, once
subscribed, reads the comparison's evidence afresh, so an update published before the
subscription took effect is not missed. Each local subscriber keeps only the newest update
(a slow client skips intermediate versions instead of building a backlog). When the server shuts
down, ``close`` ends every wait at once (``Closing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPubSub
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException

from modelcompare.service.store.connection import AsyncClient, is_cluster
from modelcompare.service.store.keys import Keys, comparison_id_from_channel, updates_pattern

log = logging.getLogger("modelcompare.broadcast")


class Closing(Exception):
    """The server is shutting down: stop waiting for updates."""


class Subscription:
    def __init__(self, closed: bool = False) -> None:
        self.latest: dict[str, Any] | None = None
        self.deleted = False
        self.closed = closed
        self._event = asyncio.Event()

    def close(self) -> None:
        self.closed = True
        self._event.set()

    def offer(self, payload: dict[str, Any]) -> None:
        if payload.get("deleted"):
            self.deleted = True
        elif self.latest is None or payload["version"] > self.latest["version"]:
            self.latest = payload
        self._event.set()

    async def next(self, after_version: int, timeout: float | None = None) -> dict[str, Any] | None:
        """The newest update with a version above ``after_version``; None when deleted;
        ``TimeoutError`` after ``timeout`` seconds, ``Closing`` when the server shuts down."""
        while True:
            if self.closed:
                raise Closing
            if self.deleted:
                return None
            if self.latest is not None and self.latest["version"] > after_version:
                return self.latest
            self._event.clear()
            await asyncio.wait_for(self._event.wait(), timeout)


class Broadcaster:
    def __init__(self, client: AsyncClient, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._subscribers: dict[str, set[Subscription]] = {}
        # comparison -> its newest update and that update's websocket message, encoded once
        self._messages: dict[str, tuple[dict[str, Any], str]] = {}
        self._changed = asyncio.Event()  # the set of comparisons with subscribers changed
        # cluster: comparisons whose master did not answer -> loop time to try again; the others
        # are followed meanwhile (one dead master must not cut every comparison's updates)
        self._deferred: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.closed = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen())
        await asyncio.wait_for(self.ready.wait(), 10)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def close(self) -> None:
        """End every wait, now and from now on (shutdown has begun)."""
        self.closed = True
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.close()

    @contextlib.contextmanager
    def subscribe(self, cid: str) -> Iterator[Subscription]:
        subscription = Subscription(closed=self.closed)
        self._subscribers.setdefault(cid, set()).add(subscription)
        self._changed.set()
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(cid, set())
            subscribers.discard(subscription)
            if not subscribers:
                self._subscribers.pop(cid, None)
                self._messages.pop(cid, None)
                self._changed.set()

    def message(self, cid: str, update: dict[str, Any]) -> str:
        """The websocket message of ``update``: encoded once for all of the comparison's
        websockets (each gets the same update object from ``_dispatch``)."""
        cached = self._messages.get(cid)
        if cached is None or cached[0] is not update:
            cached = (update, json.dumps({"type": "update", "evidence": update}))
            self._messages[cid] = cached
        return cached[1]

    async def _listen(self) -> None:
        if is_cluster(self._client):
            await self._listen_sharded()
            return
        while True:
            try:
                pubsub = self._client.pubsub()
                await pubsub.psubscribe(updates_pattern(self._prefix))
                self.ready.set()
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        self._dispatch(message["channel"].decode(), message["data"])
            except (aioredis.ConnectionError, OSError) as exc:
                log.warning("pub/sub connection lost: %s", exc)
                await asyncio.sleep(0.5)

    async def _listen_sharded(self) -> None:
        assert isinstance(self._client, AsyncRedisCluster)
        while True:
            pubsub = self._client.pubsub()
            try:
                await self._client.initialize()  # the slot map: SSUBSCRIBE needs it first
                active: set[str] = set()
                self.ready.set()
                while True:
                    self._changed.clear()  # before _follow reads the subscribers: none missed
                    await self._follow(pubsub, active)
                    if not active:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._changed.wait(), 1.0)
                        continue
                    message = await pubsub.get_sharded_message(ignore_subscribe_messages=True,
                                                               timeout=0.05)
                    if message is not None and message["type"] in ("smessage", b"smessage"):
                        self._dispatch(message["channel"].decode(), message["data"])
            except (aioredis.RedisError, OSError) as exc:
                log.warning("sharded pub/sub connection lost: %s", exc)
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(aioredis.RedisError, OSError):
                    await pubsub.aclose()

    async def _follow(self, pubsub: ClusterPubSub, active: set[str]) -> None:
        """Subscribe to the channels of the comparisons with local subscribers, and only those."""
        wanted = set(self._subscribers)
        now = asyncio.get_running_loop().time()
        for cid in sorted(wanted - active):
            keys = Keys(self._prefix, cid)
            if self._deferred.get(cid, 0.0) > now or not await self._answers(keys.updates):
                continue
            await pubsub.ssubscribe(keys.updates)
            active.add(cid)
            current = await self._client.get(keys.evidence)
            if current is not None:
                self._dispatch(keys.updates, current)
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

    def _dispatch(self, channel: str, data: bytes) -> None:
        subscribers = self._subscribers.get(comparison_id_from_channel(channel))
        if not subscribers:
            return
        payload = json.loads(data)
        for subscription in list(subscribers):
            subscription.offer(payload)
