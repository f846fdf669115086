"""Connection floods (service/api/http.py): silent connections make room for one another while a
client being served keeps its connection, a connection refused at the cap reads why, and a
websocket past ``max_websockets`` is closed with 1013 and the reason."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from http.client import HTTPConnection
from typing import Any, cast

import httpx
import pytest
import websockets
from service_helpers import comparison_body

from modelcompare.service.api import http
from modelcompare.service.api.http import Waiting


def test_idle_connections_make_room_silent_ones_first() -> None:
    waiting = Waiting()
    first, second, served, gone = (cast(Any, object()) for _ in range(4))
    waiting.fresh(first, 0.0)
    waiting.fresh(second, 0.5)
    waiting.fresh(gone, 0.6)
    waiting.discard(gone)
    waiting.kept(served, 0.9)  # answered last at 0.9
    assert waiting.first_idle(0.8) is None  # none has waited IDLE_AFTER (1 s)
    assert waiting.first_idle(1.2) is first
    assert waiting.first_idle(1.2) is None  # second waited 0.7 s, served 0.3 s
    assert waiting.first_idle(1.6) is second
    assert waiting.first_idle(1.6) is None
    assert waiting.first_idle(2.0) is served
    assert waiting.first_idle(9.0) is None


def healthz(connection: HTTPConnection) -> int:
    """GET /healthz on ``connection``'s socket, which must still be the first one it opened."""
    sock = connection.sock
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    assert sock is None or connection.sock is sock, "the served connection was closed"
    return response.status


def unread(sock: socket.socket) -> bytes | None:
    """What the server has sent on ``sock`` (b"" once closed); None while it sends nothing."""
    sock.setblocking(False)
    try:
        return sock.recv(4096)
    except BlockingIOError:
        return None


@pytest.mark.slow
def test_silent_connections_make_room_for_one_another_not_for_a_served_client(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "IDLE_AFTER", 0.3)
    host, port = serve(max_connections=10, request_read_timeout=30)
    served = HTTPConnection(host, port, timeout=10)
    try:
        assert healthz(served) == 200
        early = [socket.create_connection((host, port)) for _ in range(9)]  # the cap is full
        time.sleep(0.4)  # the early ones are idle now
        assert healthz(served) == 200  # served again: not idle
        late = [socket.create_connection((host, port)) for _ in range(20)]
        time.sleep(0.1)
        assert [unread(s) for s in early] == [b""] * 9  # closed to make room for 9 late ones
        answers = [unread(s) for s in late]
        refused = [a for a in answers if a]
        assert answers.count(None) + len(refused) == 20 and refused
        head, body = refused[0].split(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head
        assert json.loads(body)["error"]["details"] == {"limit": "max_connections"}
        assert healthz(served) == 200
        for sock in early + late:
            sock.close()
    finally:
        served.close()


def test_websockets_past_the_cap_are_closed_with_1013_and_the_reason(serve: Any) -> None:
    host, port = serve(max_websockets=2)
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
    url = f"ws://{host}:{port}/v1/comparisons/{cid}/ws"

    async def snapshot(ws: Any) -> str:
        return str(json.loads(await asyncio.wait_for(ws.recv(), 10))["type"])

    async def scenario() -> tuple[int, str, str]:
        async with websockets.connect(url) as one, websockets.connect(url) as two:
            assert [await snapshot(one), await snapshot(two)] == ["snapshot", "snapshot"]
            async with websockets.connect(url) as three:
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(three.recv(), 10)
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
                assert (await client.get("/healthz")).status_code == 200  # HTTP is served
        await asyncio.sleep(0.1)  # both closed: room again
        async with websockets.connect(url) as again:
            again_type = await snapshot(again)
        assert closed.value.rcvd is not None
        return closed.value.rcvd.code, closed.value.rcvd.reason, again_type

    code, reason, again_type = asyncio.run(scenario())
    assert code == 1013 and "max_websockets" in reason and "reconnect" in reason
    assert again_type == "snapshot"
