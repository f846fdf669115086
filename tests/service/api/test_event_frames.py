"""Decision events on the websocket: ``{"type": "event"}`` frames, each before the update of its
chunk, the same events GET …/events holds, none missed when the client reads late."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import websockets
from service_helpers import chunks, comparison_body, regression_data
from service_server import Server, StartServer

BEHIND = {"name": "behind", "when": {"log_bayes_factor": {
    "model": "right", "against": "too_few", "below": 0.0}}}


async def frames_of(server: Server, parts: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        body = {**comparison_body("exact"), "rules": [BEHIND]}
        cid = (await client.post("/v1/comparisons", json=body)).json()["id"]
        async with websockets.connect(f"{server.ws_url}/v1/comparisons/{cid}/ws") as ws:
            for part in parts:  # read nothing meanwhile: the socket falls behind
                reply = await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=part)
                assert reply.status_code == 200
            frames: list[Any] = []
            while not frames or frames[-1].get("evidence", {}).get("sequence") != len(parts):
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        stored = (await client.get(f"/v1/comparisons/{cid}/events")).json()["events"]
    return frames, stored


def test_event_frames_come_before_the_update_of_their_chunk(start_server: StartServer) -> None:
    x, y = regression_data(200, seed=0)
    x[:, 2] *= 0.3  # log BF(right : too_few) < 0 after chunks 1 and 6 only (test_rules.py)
    frames, stored = asyncio.run(frames_of(start_server("local"), chunks(x, y, 10)[:8]))
    assert frames[0]["type"] == "snapshot"
    events = [f["event"] for f in frames if f["type"] == "event"]
    assert events == stored
    assert [(e["kind"], e["sequence"]) for e in events] == [
        ("fired", 1), ("cleared", 2), ("fired", 6), ("cleared", 7)]
    for event in events:
        at = frames.index({"type": "event", "event": event})
        later = [f["evidence"]["sequence"] for f in frames[at:] if f["type"] == "update"]
        before = [f["evidence"]["sequence"] for f in frames[:at] if f["type"] != "event"]
        assert later[0] >= event["sequence"] > max(before)
