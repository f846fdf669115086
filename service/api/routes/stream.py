"""Websocket: a snapshot on connect, then the newest evidence after every commit, each preceded
by the decision events of the chunks it passed (read from the store, so that a client that
skips versions misses no event); closed with
1012 (service restart: reconnect) when the server shuts down, 1013 (try again later) when the
snapshot cannot be read (and, by the server before the app runs, past ``max_websockets``:
service/api/http.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from modelcompare.service.api.broadcast import Closing
from modelcompare.service.api.deps import BroadcasterDep, RulesDep, StoreDep
from modelcompare.service.api.errors import UNAVAILABLE, unavailable
from modelcompare.service.store.comparisons import NotFound
from modelcompare.service.store.rules import Rules

router = APIRouter(tags=["stream"])

CLOSE_NOT_FOUND = 4404
CLOSE_SERVICE_RESTART = 1012
CLOSE_TRY_AGAIN_LATER = 1013
EVENTS_PAGE = 100  # events read from the store at a time


@router.websocket("/v1/comparisons/{cid}/ws")
async def evidence_stream(
    websocket: WebSocket, cid: str, store: StoreDep, rules: RulesDep, broadcaster: BroadcasterDep
) -> None:
    """Messages are ``{"type": "snapshot"|"update", "evidence": {...}}`` with rising versions;
    a slow client gets the newest version, skipping those it had no time for. Before an update,
    ``{"type": "event", "event": {...}}`` for each decision event of the chunks after the last
    one sent (GET …/events holds the same, and those before the snapshot). The connection is
    accepted once the snapshot is read; when it cannot be (Redis unreachable, or its pool busy
    past its timeout), it is closed at once with 1013 (try again later) and the reason."""
    with broadcaster.subscribe(cid) as subscription:
        try:
            evidence = json.loads(await store.shown_evidence(cid))
        except NotFound:
            await websocket.accept()
            await websocket.send_json({"type": "error", "error": {
                "code": "not_found", "message": f"no comparison with id {cid!r}",
                "details": {"id": cid}}})
            await websocket.close(code=CLOSE_NOT_FOUND)
            return
        except UNAVAILABLE as exc:
            # Accepted only to say why: no snapshot to send, so no stream to follow.
            await websocket.accept()
            code, _ = unavailable(exc)
            reason = ("the Redis Cluster shard holding this comparison is down or failing over; "
                      "reconnect" if code == "cluster_unavailable"
                      else "the data store is unreachable or busy; reconnect")
            await websocket.close(code=CLOSE_TRY_AGAIN_LATER, reason=reason)
            return
        await websocket.accept()
        await websocket.send_text(json.dumps({"type": "snapshot", "evidence": evidence}))
        version, sequence = evidence["version"], evidence["sequence"]
        receiver = asyncio.create_task(_drain(websocket))
        try:
            while True:
                waiter = asyncio.create_task(subscription.next(version))
                done, _ = await asyncio.wait({waiter, receiver},
                                             return_when=asyncio.FIRST_COMPLETED)
                if receiver in done:
                    waiter.cancel()
                    return
                try:
                    update = waiter.result()
                except Closing:
                    await websocket.close(code=CLOSE_SERVICE_RESTART)
                    return
                if update is None:
                    await websocket.send_json({"type": "deleted", "id": cid})
                    await websocket.close()
                    return
                version = update["version"]
                await _send_events(websocket, rules, cid, sequence, update["sequence"])
                sequence = max(sequence, update["sequence"])
                await websocket.send_text(broadcaster.message(cid, update))
        except WebSocketDisconnect:
            return
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                await receiver


async def _send_events(websocket: WebSocket, rules: Rules, cid: str, after: int,
                       until: int) -> None:
    """The events of chunks ``after`` < sequence <= ``until``, oldest first."""
    while after < until:
        try:
            events = await rules.events(cid, after, EVENTS_PAGE)
        except NotFound:
            return  # deleted meanwhile: the next update says so
        events = [e for e in events if e.sequence <= until]
        for event in events:
            await websocket.send_text(json.dumps({"type": "event", "event": event.public()}))
        if len(events) < EVENTS_PAGE:
            return
        after = events[-1].sequence


async def _drain(websocket: WebSocket) -> None:
    """Reads (and ignores) client messages until it disconnects."""
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            await websocket.receive_text()
