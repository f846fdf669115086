"""Relays published evidence updates to this process's websockets and waiting requests.

The updates come from the store (``modelcompare.service.store.updates.UpdateFeed``), for the
comparisons this process has local subscribers for. Each local subscriber keeps only the newest
update (a slow client skips intermediate versions instead of building a backlog). When the
server shuts down, ``close`` ends every wait at once (``Closing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from modelcompare.service.store.updates import UpdateFeed


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
    def __init__(self, feed: UpdateFeed) -> None:
        self._feed = feed
        self._subscribers: dict[str, set[Subscription]] = {}
        # comparison -> its newest update and that update's websocket message, encoded once
        self._messages: dict[str, tuple[dict[str, Any], str]] = {}
        self.changed = asyncio.Event()  # the set of comparisons with subscribers changed
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.closed = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._feed.relay(self))
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
        self.changed.set()
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(cid, set())
            subscribers.discard(subscription)
            if not subscribers:
                self._subscribers.pop(cid, None)
                self._messages.pop(cid, None)
                self.changed.set()

    def message(self, cid: str, update: dict[str, Any]) -> str:
        """The websocket message of ``update``: encoded once for all of the comparison's
        websockets (each gets the same update object from ``deliver``)."""
        cached = self._messages.get(cid)
        if cached is None or cached[0] is not update:
            cached = (update, json.dumps({"type": "update", "evidence": update}))
            self._messages[cid] = cached
        return cached[1]

    def followed(self) -> set[str]:
        """The comparisons with local subscribers."""
        return set(self._subscribers)

    def deliver(self, cid: str, data: bytes) -> None:
        """Offer one published update (its JSON) to the comparison's local subscribers."""
        subscribers = self._subscribers.get(cid)
        if not subscribers:
            return
        payload = json.loads(data)
        for subscription in list(subscribers):
            subscription.offer(payload)
