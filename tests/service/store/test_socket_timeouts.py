"""Redis socket timeouts are the service's, not redis-py's (whose default went from none to 5 s in
version 8), and no blocking command the service sends outlasts them: a coordinator waiting for
its helpers' results must not read its own wait as a lost connection."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from pydantic import ValidationError
from service_server import LOCAL_REDIS, local_redis_available

from modelcompare.service.core.config import Settings
from modelcompare.service.store.connection import BLOCK_MAX, SOCKET_TIMEOUT, Connection
from modelcompare.service.store.tasks import TaskBoard

pytestmark = pytest.mark.skipif(not local_redis_available(), reason="no Redis at 6379")


def timeouts(kwargs: dict[str, object]) -> tuple[object, object]:
    return kwargs["socket_timeout"], kwargs["socket_connect_timeout"]


def test_every_client_carries_the_configured_socket_timeout() -> None:
    connection = Connection.detect(LOCAL_REDIS, socket_timeout=3.5)
    assert timeouts(connection.sync_client().connection_pool.connection_kwargs) == (3.5, 3.5)
    assert timeouts(connection.async_client().connection_pool.connection_kwargs) == (3.5, 3.5)
    pooled = connection.pooled_async_client(size=4, timeout=1.0)
    assert timeouts(pooled.connection_pool.connection_kwargs) == (3.5, 3.5)
    asyncio.run(pooled.aclose())
    default = Connection.detect(LOCAL_REDIS).sync_client()
    assert timeouts(default.connection_pool.connection_kwargs) == (SOCKET_TIMEOUT,) * 2


def test_a_long_wait_for_results_outlasts_the_shortest_socket_timeout() -> None:
    floor = Settings.model_fields["redis_socket_timeout"].metadata[0].ge
    client = Connection.detect(LOCAL_REDIS, socket_timeout=floor).sync_client()
    board = TaskBoard(client, f"mctest-{uuid.uuid4().hex[:10]}", "coordinator")
    started = time.monotonic()
    board.wait("no-such-comparison", timeout=3 * floor)  # nothing lands: blocks BLOCK_MAX
    assert BLOCK_MAX * 0.9 <= time.monotonic() - started < floor


def test_the_socket_timeout_setting_stays_above_the_longest_block() -> None:
    assert Settings(redis_socket_timeout=2 * BLOCK_MAX).redis_socket_timeout == 2 * BLOCK_MAX
    with pytest.raises(ValidationError, match="redis_socket_timeout"):
        Settings(redis_socket_timeout=2 * BLOCK_MAX - 0.1)
