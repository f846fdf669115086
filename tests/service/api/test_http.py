"""HTTP server limits (service/api/http.py, as ``modelcompare serve`` runs them): header size,
request-read and keep-alive timeouts, the connection cap; the Redis pool that waits, and the
websocket closed with a reason when its snapshot cannot be read."""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import websockets
from service_helpers import assert_error, comparison_body


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes ``sock`` (fails after ``seconds``)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    while sock.recv(4096):
        pass
    return time.monotonic() - started


def test_headers_over_the_limit_are_refused(serve: Any) -> None:
    host, port = serve(max_header_bytes=4096)
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        assert client.get("/healthz", headers={"x-big": "a" * 3000}).status_code == 200
        # h11 counts what it buffers of a header block still incomplete: a block that arrives
        # whole in one read may pass; one larger than a socket read cannot.
        response = client.get("/healthz", headers={"x-big": "a" * 1_000_000})
        assert response.status_code == 400  # h11: "Invalid HTTP request received."


@pytest.mark.slow
def test_silent_and_slow_connections_are_closed_after_the_read_timeout(serve: Any) -> None:
    host, port = serve(request_read_timeout=0.5, keep_alive_timeout=0.3)
    with socket.create_connection((host, port)) as silent:  # sends nothing at all
        assert 0.4 < closed_within(silent, 5) < 2.5
    with socket.create_connection((host, port)) as slow:  # part of a request line, no more
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        assert 0.4 < closed_within(slow, 5) < 2.5
    with socket.create_connection((host, port)) as body:  # headers, then half the body
        body.sendall(b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"name\"")
        assert 0.4 < closed_within(body, 5) < 2.5
    with socket.create_connection((host, port)) as idle:  # one request, then idle keep-alive
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_within(idle, 5) < 2.5
    with httpx.Client(base_url=f"http://{host}:{port}") as client:  # a long request is not cut
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        time.sleep(0.6)
        assert client.get(f"/v1/comparisons/{cid}").status_code == 200


@pytest.mark.slow
def test_the_connection_cap_evicts_idle_connections_before_refusing(serve: Any) -> None:
    host, port = serve(max_connections=3, request_read_timeout=30)
    url = f"http://{host}:{port}"
    idle = [socket.create_connection((host, port)) for _ in range(3)]
    try:
        time.sleep(1.2)  # idle: silent for over a second (IDLE_AFTER)
        with httpx.Client(base_url=url) as client:  # room made by closing the oldest idle one
            assert client.get("/healthz").status_code == 200
        assert closed_within(idle[0], 5) < 1
    finally:
        for sock in idle:
            sock.close()
    busy = [socket.create_connection((host, port)) for _ in range(3)]
    try:
        for sock in busy:  # each in the middle of a request body: none can be evicted
            sock.sendall(b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.2)
        with httpx.Client(base_url=url) as client:
            assert client.get("/healthz").status_code == 503
    finally:
        for sock in busy:
            sock.close()
    time.sleep(0.2)
    with httpx.Client(base_url=url) as client:
        assert client.get("/healthz").status_code == 200


@pytest.mark.slow
def test_a_busy_redis_pool_makes_requests_wait_not_fail(serve: Any) -> None:
    host, port = serve(redis_pool_size=3, redis_pool_timeout=30)
    url = f"http://{host}:{port}"
    with httpx.Client(base_url=url) as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]

    def get(_: int) -> int:
        with httpx.Client(base_url=url, timeout=60) as client:
            return client.get(f"/v1/comparisons/{cid}/evidence").status_code

    with ThreadPoolExecutor(60) as pool:
        statuses = list(pool.map(get, range(120)))
    assert statuses == [200] * 120


@pytest.mark.slow
def test_an_exhausted_pool_gives_503_and_closes_websockets_with_a_reason(serve: Any) -> None:
    # The pub/sub relay holds the pool's only connection: every other use waits, then fails.
    host, port = serve(redis_pool_size=1, redis_pool_timeout=0.2)
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        started = time.monotonic()
        assert_error(client.get("/v1/comparisons/abc/evidence"), 503, "unavailable")
        assert time.monotonic() - started >= 0.2

    async def connect() -> tuple[int | None, str]:
        async with websockets.connect(f"ws://{host}:{port}/v1/comparisons/abc/ws") as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None
        return closed.value.rcvd.code, closed.value.rcvd.reason

    code, reason = asyncio.run(connect())
    assert code == 1013 and "reconnect" in reason
