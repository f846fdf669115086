"""``Comparisons.applied_rows`` (what POST /expectation computes from): the rows of the first
``applied`` chunks, one ``Rows`` per chunk, none of those stored past them."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
import redis.asyncio as aioredis
from service_server import LOCAL_REDIS, delete_prefix, local_redis_available

from modelcompare.estimators import Rows
from modelcompare.service.store.codec import encode_block
from modelcompare.service.store.comparisons import Comparisons

pytestmark = pytest.mark.skipif(not local_redis_available(),
                                reason="needs Redis at 127.0.0.1:6379")


def test_applied_rows_are_the_first_chunks_only() -> None:
    prefix = f"test-applied-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(0)
    stored = [(rng.normal(size=(rows, 2)), rng.normal(size=rows)) for rows in (3, 5, 4)]

    async def read(applied: int) -> list[Rows]:
        client = aioredis.Redis.from_url(LOCAL_REDIS)
        try:
            store = Comparisons(client, prefix, idempotency_ttl=60)
            await client.rpush(store.keys("c").blocks, *(encode_block(x, y) for x, y in stored))
            return await store.applied_rows("c", applied)
        finally:
            await client.aclose()

    try:
        assert asyncio.run(read(0)) == []
        rows = asyncio.run(read(2))
    finally:
        delete_prefix(LOCAL_REDIS, prefix)
    assert len(rows) == 2
    for (x, y), chunk in zip(stored[:2], rows, strict=True):
        np.testing.assert_array_equal(chunk.x.numpy(), x)
        np.testing.assert_array_equal(chunk.y.numpy(), y)
