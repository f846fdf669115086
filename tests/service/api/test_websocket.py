"""Websocket: snapshot, then every update in order; slow clients skip; several API processes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import websockets
from service_helpers import chunks, comparison_body, regression_data
from service_server import Server, StartServer

from modelcompare.service.api.broadcast import Subscription


async def _receive(ws: Any, timeout: float = 30) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


def test_snapshot_then_every_update_in_order(server: Server) -> None:
    x, y = regression_data(120)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]

    async def scenario() -> list[dict[str, Any]]:
        async with websockets.connect(f"{server.ws_url}/v1/comparisons/{cid}/ws") as ws:
            snapshot = await _receive(ws)
            assert snapshot["type"] == "snapshot"
            assert snapshot["evidence"]["version"] == 0
            assert all(m["window"] is None for m in snapshot["evidence"]["models"])
            async with httpx.AsyncClient(base_url=server.url) as client:
                for chunk in chunks(x, y, 20):
                    await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
            return [await _receive(ws) for _ in range(6)]

    updates = asyncio.run(scenario())
    assert [u["type"] for u in updates] == ["update"] * 6
    assert [u["evidence"]["version"] for u in updates] == [1, 2, 3, 4, 5, 6]
    assert [u["evidence"]["sequence"] for u in updates] == [1, 2, 3, 4, 5, 6]
    assert [u["evidence"]["n_observations"] for u in updates] == [20, 40, 60, 80, 100, 120]
    for update in updates:  # the windowed evidence rides along (the window holds every row)
        n = update["evidence"]["n_observations"]
        assert all(m["window"]["rows"] == n for m in update["evidence"]["models"])


def test_updates_reach_clients_of_another_api_process(start_server: StartServer) -> None:
    """Two API servers on one Redis: ingest through one, listen on the other (pub/sub)."""
    ingest = start_server("local")
    listen = start_server("local", key_prefix=ingest.settings.key_prefix, embedded_worker=False)
    x, y = regression_data(40)
    with ingest.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with websockets.connect(f"{listen.ws_url}/v1/comparisons/{cid}/ws") as ws:
            snapshot = await _receive(ws)
            async with httpx.AsyncClient(base_url=ingest.url) as client:
                for chunk in chunks(x, y, 20):
                    await client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
            updates = [await _receive(ws)]
            while updates[-1]["evidence"]["sequence"] < 2:  # two commits may coalesce
                updates.append(await _receive(ws))
            async with httpx.AsyncClient(base_url=ingest.url) as client:
                await client.delete(f"/v1/comparisons/{cid}")
            updates.append(await _receive(ws))
            return snapshot, updates

    snapshot, updates = asyncio.run(scenario())
    assert snapshot["type"] == "snapshot"
    sequences = [u["evidence"]["sequence"] for u in updates[:-1]]
    assert sequences in ([1, 2], [2])
    assert updates[-1] == {"type": "deleted", "id": cid}


def test_slow_client_gets_the_newest_state_not_a_backlog() -> None:
    """Each websocket reads through a one-slot subscription: while it is busy sending, newer
    updates replace older ones (and late, older messages are ignored)."""

    async def scenario() -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
        subscription = Subscription()
        for version in range(1, 11):
            subscription.offer({"version": version})
        newest = await subscription.next(0, timeout=1)
        subscription.offer({"version": 4})
        try:
            await subscription.next(10, timeout=0.05)
            blocked = False
        except TimeoutError:
            blocked = True
        return newest, subscription.latest, blocked

    newest, latest, blocked = asyncio.run(scenario())
    assert newest == {"version": 10}
    assert latest == {"version": 10}
    assert blocked  # nothing newer than version 10 arrived


def test_unknown_comparison_closes_with_an_error(server: Server) -> None:
    async def scenario() -> tuple[dict[str, Any], int | None]:
        async with websockets.connect(f"{server.ws_url}/v1/comparisons/nope/ws") as ws:
            message = await _receive(ws)
            await asyncio.wait_for(ws.wait_closed(), 10)
            return message, ws.close_code

    message, code = asyncio.run(scenario())
    assert message["type"] == "error" and message["error"]["code"] == "not_found"
    assert code == 4404
