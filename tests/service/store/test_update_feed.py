"""``UpdateFeed`` on one Redis node: a published evidence update reaches the listener as
``(comparison id, its JSON)``, once the feed is ready (the cluster's sharded channels are
tested end to end in test_cluster.py)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import redis.asyncio as aioredis
from service_server import LOCAL_REDIS, delete_prefix, local_redis_available

from modelcompare.service.store.keys import Keys
from modelcompare.service.store.updates import UpdateFeed

pytestmark = pytest.mark.skipif(not local_redis_available(),
                                reason="needs Redis at 127.0.0.1:6379")


class Recorder:
    """A ``Listener`` that keeps what it is given."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()
        self.delivered: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    def followed(self) -> set[str]:
        return {"c"}

    def deliver(self, cid: str, data: bytes) -> None:
        self.delivered.put_nowait((cid, data))


def test_a_published_update_is_delivered_with_its_comparison_id() -> None:
    prefix = f"test-feed-{uuid.uuid4().hex[:8]}"
    update = json.dumps({"id": "c", "version": 2}).encode()

    async def relay() -> tuple[str, bytes]:
        client = aioredis.Redis.from_url(LOCAL_REDIS)
        listener = Recorder()
        task = asyncio.create_task(UpdateFeed(client, prefix).relay(listener))
        try:
            await asyncio.wait_for(listener.ready.wait(), 10)
            # ready once PSUBSCRIBE is sent; published again until the server has taken it
            for _ in range(100):
                await client.publish(Keys(prefix, "c").updates, update)
                try:
                    return await asyncio.wait_for(listener.delivered.get(), 0.1)
                except TimeoutError:
                    continue
            raise AssertionError("no update was delivered")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()

    try:
        assert asyncio.run(relay()) == ("c", update)
    finally:
        delete_prefix(LOCAL_REDIS, prefix)
