"""Typed clients for the modelcompare HTTP API: ``Client`` (sync) and ``AsyncClient`` (asyncio).

Every route has one method, declared once with ``@endpoint`` and shared by both clients (they
differ only in how a request is sent). ``ENDPOINTS`` maps each method to its route; the tests
compare it with the app's routes, so a route without a client method fails them.

    with Client("http://127.0.0.1:8000") as api:
        cid = api.create_comparison({...})["id"]
        api.ingest(cid, x, y, wait=True)
        api.ingest(other, frame, wait=True)  # by name: pandas, Polars, pyarrow (Arrow IPC)
        names = [c["name"] for c in api.iter_comparisons()]  # every page, newest first

Reads (GET, predict, expectation) and chunks are retried ``retries`` times on a connection error
or a 503, with backoff. A chunk always carries an ``Idempotency-Key`` (a fresh one when the
caller gives none) and every retry reuses it, so the server applies it once. When the retries
run out and the chunk's fate is unknown, the error says so and carries ``idempotency_key``:
send the chunk again with that key.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import websockets

from modelcompare.service.client.calls import (
    ENDPOINTS,
    PREDICTION_FIELDS,
    Endpoint,
    Request,
    Retry,
    outcome,
)
from modelcompare.service.client.errors import ModelCompareError, ServerUnreachable, reply_error
from modelcompare.service.client.routes import API_KEY_ENV, DEFAULT_URL, URL_ENV, Routes

__all__ = ["API_KEY_ENV", "DEFAULT_URL", "ENDPOINTS", "PREDICTION_FIELDS", "URL_ENV",
           "AsyncClient", "Client", "Endpoint", "ModelCompareError", "ServerUnreachable"]


class Client(Routes[Any]):
    """Blocking client; methods return the decoded reply and raise ``ModelCompareError``."""

    def __init__(self, url: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, retries: int = 3) -> None:
        super().__init__(url, api_key, retries)
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def send(self, request: Request) -> Any:
        method, path, call = request
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, json=call.json, content=call.content,
                                              params=call.params, headers=call.headers)
            except httpx.TransportError as exc:
                result = outcome(self.url, call, attempt, failure=exc)
            else:
                result = outcome(self.url, call, attempt, response=response)
            if not isinstance(result, Retry):
                return result
            if attempt < self.retries:
                time.sleep(result.delay)
        raise result.error

    def iter_comparisons(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Every comparison the key may read, newest first, fetched a page (``limit``) at a
        time as the iteration goes."""
        cursor = None
        while True:
            page = self.list_comparisons(limit, cursor)
            yield from page["comparisons"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(Routes[Awaitable[Any]]):
    """Asyncio client: the same methods, awaited, plus ``updates`` over the websocket."""

    def __init__(self, url: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, retries: int = 3) -> None:
        super().__init__(url, api_key, retries)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout)

    async def send(self, request: Request) -> Any:
        method, path, call = request
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, json=call.json,
                                                     content=call.content, params=call.params,
                                                     headers=call.headers)
            except httpx.TransportError as exc:
                result = outcome(self.url, call, attempt, failure=exc)
            else:
                result = outcome(self.url, call, attempt, response=response)
            if not isinstance(result, Retry):
                return result
            if attempt < self.retries:
                await asyncio.sleep(result.delay)
        raise result.error

    async def iter_comparisons(self, limit: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every comparison the key may read, newest first, a page (``limit``) at a time."""
        cursor = None
        while True:
            page = await self.list_comparisons(limit, cursor)
            for comparison in page["comparisons"]:
                yield comparison
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def updates(self, cid: str) -> AsyncIterator[dict[str, Any]]:
        """Websocket messages: ``{"type": "snapshot", "evidence"}`` first, then one
        ``{"type": "update", "evidence"}`` per applied chunk (rising versions), each after the
        ``{"type": "event", "event"}`` messages of the decision rules that fired or cleared on
        the chunks it passed; the iterator ends after ``{"type": "deleted"}``. An unknown id
        raises ``ModelCompareError`` (404)."""
        query = "" if self.api_key is None else "?" + urlencode({"token": self.api_key})
        url = re.sub(r"^http", "ws", self.url) + _ws_path(cid) + query
        try:
            async with websockets.connect(url, max_size=None) as socket:
                async for raw in socket:
                    message = json.loads(raw)
                    if message["type"] == "error":
                        error = message["error"]
                        raise ModelCompareError(404, error["code"], error["message"],
                                                error.get("details"))
                    yield message
                    if message["type"] == "deleted":
                        return
        except websockets.InvalidStatus as exc:
            raise reply_error(exc.response.status_code, exc.response.body or b"") from None
        except (OSError, websockets.ConnectionClosedError) as exc:
            raise ServerUnreachable(self.url, str(exc) or type(exc).__name__) from None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


ENDPOINTS["updates"] = Endpoint("WS", "/v1/comparisons/{cid}/ws")


def _ws_path(cid: str) -> str:
    return ENDPOINTS["updates"].path.format(cid=quote(cid, safe=""))
