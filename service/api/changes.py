"""Compare-and-set changes of a comparison made by the API (add or remove a model, change its
rules): each attempt reads the comparison, computes the change and runs its script on the
version it read; a comparison that changed meanwhile (a worker's commit, another change) makes
the attempt stale, and it is made again on what is there now."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from modelcompare.service.api.errors import ApiError

CHANGE_TRIES = 20
T = TypeVar("T")


async def retried(cid: str, attempt: Callable[[], Awaitable[T | None]]) -> T:
    """``attempt()`` until it answers (None: stale, try again); 409 ``busy`` after
    ``CHANGE_TRIES`` stale attempts."""
    for _ in range(CHANGE_TRIES):
        answer = await attempt()
        if answer is not None:
            return answer
    raise ApiError(409, "busy", "the comparison kept changing; retry", {"id": cid})
