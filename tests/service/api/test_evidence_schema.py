"""The evidence body is exactly what its response model declares: real bodies of a run with a
model added mid-stream, a model that failed and a chunk skipped validate against ``Evidence``
(and the bodies that embed it) with no field left undeclared, in every reply and websocket
frame, and the OpenAPI document lists the same fields. (A ?wait=true reply is the body with
``duplicate`` beside it: declared as ``Evidence``, which the generated clients name it.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets
from progress_scenario import LATE, SGAIS
from pydantic import BaseModel
from service_helpers import chunks, comparison_body, regression_data
from service_server import StartServer

import modelcompare.service.engine
from modelcompare.estimators import EstimatorError, Rows
from modelcompare.service.api.responses import (
    Evidence,
    LastError,
    ModelAdded,
    ModelEvidence,
    ModelRemoved,
    Reliability,
    WindowEvidence,
)
from modelcompare.service.engine import Runner

FRAGILE, EVERY = 555.0, 666.0  # markers in y: the model too_few fails / every model fails


@pytest.fixture
def injected(monkeypatch: pytest.MonkeyPatch) -> None:
    real_update = Runner.update

    def update(self: Runner, state: Any, rows: Rows, *args: Any) -> Any:
        assert rows.y is not None
        if EVERY in rows.y or (FRAGILE in rows.y and self.name == "too_few"):
            raise EstimatorError("injected")
        return real_update(self, state, rows, *args)

    monkeypatch.setattr(modelcompare.service.engine.Runner, "update", update)


def undeclared(value: Any, path: str = "") -> list[str]:
    """Every field of a validated body (nested) that its model does not declare: what
    ``extra="forbid"`` would refuse."""
    if isinstance(value, BaseModel):
        found = [f"{path}.{name}" for name in value.model_extra or {}]
        for name in type(value).model_fields:
            found += undeclared(getattr(value, name), f"{path}.{name}")
        return found
    if isinstance(value, list):
        return [item for i, v in enumerate(value) for item in undeclared(v, f"{path}[{i}]")]
    return []


def exact(model: type[BaseModel], body: dict[str, Any]) -> BaseModel:
    validated = model.model_validate(body)
    assert undeclared(validated) == []
    return validated


def applied(reply: dict[str, Any]) -> dict[str, Any]:
    """The evidence of a ?wait=true reply."""
    assert isinstance(reply.pop("duplicate"), bool)
    return reply


async def run(url: str, ws_url: str) -> tuple[list[tuple[type[BaseModel], Any]], list[Any]]:
    """Every reply carrying the evidence, and every websocket frame."""
    x, y = regression_data(60)
    parts = chunks(x, y, 20)
    bad = [{"x": [[0.1, 0.2, 0.3, 0.4]], "y": [marker]} for marker in (FRAGILE, EVERY)]
    replies: list[tuple[type[BaseModel], Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        created = await client.post("/v1/comparisons", json=comparison_body("sgais", **SGAIS))
        cid = created.json()["id"]
        async with websockets.connect(f"{ws_url}/v1/comparisons/{cid}/ws") as ws:
            for chunk in [parts[0], *bad]:
                reply = await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
                replies.append((Evidence, applied(reply.json())))
            replies.append((ModelAdded, (await client.post(f"/v1/comparisons/{cid}/models",
                                                           json=LATE)).json()))
            for chunk in parts[1:]:
                reply = await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
                replies.append((Evidence, applied(reply.json())))
            removed = await client.delete(f"/v1/comparisons/{cid}/models/wrong_noise")
            replies.append((ModelRemoved, removed.json()))
            replies.append((Evidence, (await client.get(f"/v1/comparisons/{cid}/evidence")).json()))
            frames = []
            while not frames or frames[-1]["evidence"]["version"] < replies[-1][1]["version"]:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return replies, frames


@pytest.mark.usefixtures("injected")
def test_real_bodies_have_only_declared_fields(start_server: StartServer) -> None:
    server = start_server("local", poison_max_attempts=1, poison_scope="model",
                          poison_policy="skip")
    replies, frames = asyncio.run(run(server.url, server.ws_url))
    bodies = [exact(kind, body) for kind, body in replies]
    bodies += [exact(Evidence, frame["evidence"]) for frame in frames]
    final = bodies[-len(frames) - 1]
    assert isinstance(final, Evidence)
    assert final.skipped_chunks == 1 and final.last_error is not None
    models = {m.name: m for m in final.models}
    assert models["too_few"].failed and models["late"].sequence == final.sequence
    assert models["right"].window is not None
    assert [frame["type"] for frame in frames[:1]] == ["snapshot"]
    old = {**replies[-1][1], "models": [{**m, "window_checkpoints": []}
                                        for m in replies[-1][1]["models"][:1]]}
    assert undeclared(Evidence.model_validate(old)) == [".models[0].window_checkpoints"]


def test_the_openapi_document_declares_every_field_of_the_body(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for model in (Evidence, ModelEvidence, WindowEvidence, Reliability, LastError):
        assert set(schemas[model.__name__]["properties"]) == set(model.model_fields)
    declared = schemas["ModelEvidence"]["properties"]
    assert declared["failed"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "window_checkpoints" not in declared
