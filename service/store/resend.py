"""Writes re-sent when Redis's reply is lost.

A lost reply (the connection drops after the command was sent) leaves the API not knowing
whether a write took effect. Every write script of the API carries the request's identity (the
client's idempotency key or one the API made) and records it in the same atomic step, so sending
it again is a no-op when the first run landed and answers what that run did
(docs/design/exactly-once.md). The re-sends are few and short: a Redis that stays away still
answers 503 within about a second and a half.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis

log = logging.getLogger(__name__)
T = TypeVar("T")

# Pauses before each re-send (s); redis-py's own retry also re-sends once on a fresh connection.
RESEND_DELAYS = (0.05, 0.25, 1.0)


async def resend_on_lost_reply(write: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``write`` (safe to repeat: it carries its request's identity); when the connection
    fails, run it again after each of ``RESEND_DELAYS``; the last failure propagates."""
    for delay in RESEND_DELAYS:
        try:
            return await write()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("no reply from Redis to %s (%s); sending it again under the same "
                        "identity in %.2f s", what, exc, delay)
            await asyncio.sleep(delay)
    return await write()
