"""A compare-and-set change is made again while it finds the comparison changed under it, and
answers 409 busy once it has been stale CHANGE_TRIES times."""

from __future__ import annotations

import asyncio

import pytest

from modelcompare.service.api.changes import CHANGE_TRIES, retried
from modelcompare.service.api.errors import ApiError


def test_a_stale_attempt_is_made_again_until_it_answers() -> None:
    calls: list[int] = []

    async def attempt() -> str | None:
        calls.append(1)
        return "done" if len(calls) == 3 else None

    assert asyncio.run(retried("c1", attempt)) == "done"
    assert len(calls) == 3


def test_an_attempt_stale_every_time_is_busy() -> None:
    calls: list[int] = []

    async def attempt() -> str | None:
        calls.append(1)
        return None

    with pytest.raises(ApiError) as raised:
        asyncio.run(retried("c1", attempt))
    assert (raised.value.status, raised.value.code) == (409, "busy")
    assert len(calls) == CHANGE_TRIES
