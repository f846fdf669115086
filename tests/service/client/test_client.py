"""modelcompare.service.client against a real server: one method per route (checked against the
app's routes), exact numbers through it, errors carrying the API's code, the websocket iterator, and
API keys."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

import numpy as np
import pytest
from service_helpers import by_name, comparison_body, exact_log_evidence, regression_data
from service_server import Server, StartServer
from starlette.routing import BaseRoute, WebSocketRoute

from modelcompare.service.api.main import create_app
from modelcompare.service.client import (
    ENDPOINTS,
    AsyncClient,
    Client,
    Endpoint,
    ModelCompareError,
    ServerUnreachable,
)
from modelcompare.service.client.calls import path_segment
from modelcompare.service.core.config import Settings


def _websocket_paths(routes: list[BaseRoute]) -> set[str]:
    """Websocket routes are not in the OpenAPI document: walk the routers for them."""
    found = set()
    for route in routes:
        if isinstance(route, WebSocketRoute):
            found.add(route.path)
        included = getattr(route, "original_router", None)  # how FastAPI wraps included routers
        if included is not None:
            found |= _websocket_paths(included.routes)
    return found


def _app_routes() -> set[Endpoint]:
    app = create_app(Settings())
    http = {Endpoint(method.upper(), path) for path, item in app.openapi()["paths"].items()
            for method in item}
    return http | {Endpoint("WS", path) for path in _websocket_paths(app.routes)}


def test_the_client_has_one_method_per_route() -> None:
    """A route added to the app without a client method (or a method left without its route)
    fails here."""
    assert set(ENDPOINTS.values()) == _app_routes()
    assert len(set(ENDPOINTS.values())) == len(ENDPOINTS)
    for name, route in ENDPOINTS.items():
        assert callable(getattr(AsyncClient, name))
        assert route.method == "WS" or callable(getattr(Client, name))


def test_every_route_through_the_sync_client(embedded_server: Server) -> None:
    server = embedded_server
    x, y = regression_data(60, seed=4)
    body = comparison_body("exact")
    with Client(server.url) as api:
        assert api.healthz() == {"status": "ok"}
        assert api.readyz() == {"status": "ready"}
        created = api.create_comparison(body)
        cid = created["id"]
        assert cid in [c["id"] for c in api.list_comparisons()["comparisons"]]
        assert api.get_comparison(cid)["name"] == "regression"

        first = api.ingest(cid, x[:30], y[:30], idempotency_key="a", wait=True)
        assert first["sequence"] == 1 and first["n_observations"] == 30
        again = api.ingest(cid, x[:30], y[:30], idempotency_key="a")
        assert again == {"sequence": 1, "rows": 30, "duplicate": True}
        api.ingest(cid, x[30:].tolist(), list(y[30:]), wait=True)  # plain lists work too

        evidence = by_name(api.evidence(cid))
        for model in body["models"]:
            columns = list(range(model["config"]["dim"]))
            exact = exact_log_evidence(model["config"], x, y, columns)
            assert evidence[model["name"]]["log_evidence"] == pytest.approx(exact, abs=1e-8)
            window = evidence[model["name"]]["window"]  # all 60 rows: fewer than the default W
            assert window["rows"] == 60
            assert window["log_evidence"] == pytest.approx(exact, abs=1e-8)
        best = max(evidence.values(), key=lambda m: m["window"]["log_evidence"])
        for m in evidence.values():
            difference = m["window"]["log_evidence"] - best["window"]["log_evidence"]
            assert m["window"]["log_bayes_factor"] == pytest.approx(difference, abs=1e-9)
            assert m["window"]["best"] == best["name"]
        weights = api.weights(cid)["weights"]
        assert weights == {name: m["posterior_probability"] for name, m in evidence.items()}
        trace = api.history(cid)["models"]["right"]
        assert trace["n_observations"] == [30, 60]

        prediction = api.predict(cid, np.array([[0.5, -1.0, 2.0, 0.0]]))
        assert len(prediction["mixture"]["mean"]) == 1
        mean = api.expectation(cid, "right", "mean", repetitions=4, seed=1)
        assert len(mean["estimate"]) == len(mean["stderr"]) and mean["n_observations"] == 60

        added = api.add_model(cid, {"name": "one", "family": "linear_regression",
                                    "config": {"dim": 1}})
        assert added["catching_up"] is True
        removed = api.remove_model(cid, "one")
        assert removed["model"] == "one"
        assert "one" not in by_name(removed["evidence"])
        assert api.dead_letters(cid)["dead_letters"] == []
        with pytest.raises(ModelCompareError) as not_halted:
            api.resume(cid, "skip")
        assert (not_halted.value.status, not_halted.value.code) == (409, "not_halted")
        assert "modelcompare" in api.metrics()  # Prometheus text

        assert api.delete_comparison(cid) is None
        with pytest.raises(ModelCompareError) as gone:
            api.get_comparison(cid)
    assert (gone.value.status, gone.value.code) == (404, "not_found")
    assert cid in gone.value.message and gone.value.details == {"id": cid}


@pytest.mark.slow
def test_errors_carry_the_api_code_and_message(embedded_server: Server) -> None:
    server = embedded_server
    with Client(server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        with pytest.raises(ModelCompareError) as bad:
            api.ingest(cid, [[1.0, 2.0]], [0.5])  # two columns where rows have four
        assert (bad.value.status, bad.value.code) == (422, "invalid_chunk")
        assert str(bad.value) == "invalid_chunk: rows of x need 4 numbers, got 2 (HTTP 422)"
        assert api.evidence(cid)["n_observations"] == 0  # the rejected chunk changed nothing
    with Client("http://127.0.0.1:9") as nowhere, pytest.raises(ServerUnreachable) as down:
        nowhere.healthz()
    assert down.value.status is None and down.value.code == "unreachable"


def test_async_client_iterates_websocket_updates(embedded_server: Server) -> None:
    server = embedded_server
    x, y = regression_data(40, seed=5)

    async def scenario() -> tuple[list[dict[str, Any]], ModelCompareError]:
        async with AsyncClient(server.url) as api:
            cid = (await api.create_comparison(comparison_body("exact")))["id"]
            messages: list[dict[str, Any]] = []
            async for message in api.updates(cid):
                messages.append(message)
                if message["type"] == "snapshot":
                    await api.ingest(cid, x, y)
                elif message["type"] == "update":
                    await api.delete_comparison(cid)
            with pytest.raises(ModelCompareError) as unknown:
                async for _ in api.updates(cid):
                    pass
            return messages, unknown.value

    messages, unknown = asyncio.run(scenario())
    assert [m["type"] for m in messages] == ["snapshot", "update", "deleted"]
    assert messages[1]["evidence"]["n_observations"] == 40
    assert [m["window"]["rows"] for m in messages[1]["evidence"]["models"]] == [40, 40, 40]
    assert (unknown.status, unknown.code) == (404, "not_found")


def test_api_keys_reach_http_and_websocket(start_server: StartServer) -> None:
    server = start_server("embedded", api_keys={"k-team": {"read": ["team-*"],
                                                           "write": ["team-*"]}})
    x, y = regression_data(20, seed=6)
    with Client(server.url, api_key="k-team") as api:
        cid = api.create_comparison({**comparison_body("exact"), "name": "team-a"})["id"]
    with Client(server.url) as anonymous, pytest.raises(ModelCompareError) as missing:
        anonymous.evidence(cid)
    assert (missing.value.status, missing.value.code) == (401, "unauthorized")

    async def scenario(key: str | None) -> list[str]:
        async with AsyncClient(server.url, api_key=key) as api:
            seen = []
            async for message in api.updates(cid):
                seen.append(message["type"])
                if message["type"] == "snapshot":
                    await api.ingest(cid, x, y)
                else:
                    return seen
        return seen

    assert asyncio.run(scenario("k-team")) == ["snapshot", "update"]
    with pytest.raises(ModelCompareError) as refused:
        asyncio.run(scenario("wrong"))
    assert refused.value.status == 401


class LossyProxy:
    """A TCP proxy in front of the server that, for the next ``drops`` replies, closes the
    connection as the reply arrives: the request was served, the client never hears it (a lost
    reply)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.drops = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.drops > 0:
                    self.drops -= 1
                    break
                target.sendall(data)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.slow
def test_chunks_always_carry_a_key_that_every_retry_reuses(embedded_server: Server) -> None:
    """A chunk without a caller's key gets one; when its reply is lost the client retries with
    that key and the server applies it once. Out of retries, the error says the outcome is
    unknown and carries the key, and sending again with it is a no-op."""
    x, y = regression_data(20, seed=7)
    proxy = LossyProxy(embedded_server.url)
    try:
        with Client(proxy.url) as api:
            cid = api.create_comparison(comparison_body("exact"))["id"]
            proxy.drops = 2
            reply = api.ingest(cid, x[:10], y[:10])  # applied at the first try, replies lost
            assert reply == {"sequence": 1, "rows": 10, "duplicate": True}
            proxy.drops = 1
            with Client(proxy.url, retries=0) as once, pytest.raises(ServerUnreachable) as lost:
                once.ingest(cid, x[10:], y[10:])
            key = lost.value.idempotency_key
            assert key is not None and len(key) == 32 and lost.value.outcome_unknown
            assert (f"the outcome is unknown: the chunk may or may not have been accepted. Send it "
                    f"again with idempotency_key={key!r}") in lost.value.message
            again = api.ingest(cid, x[10:], y[10:], idempotency_key=key, wait=True)
            assert again["duplicate"] is True and again["n_observations"] == 20
            assert api.get_comparison(cid)["ingested"] == 2
    finally:
        proxy.close()


def test_values_json_cannot_carry_are_a_client_error(embedded_server: Server) -> None:
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        x = np.zeros((3, 4))
        x[2, 1] = np.nan
        with pytest.raises(ModelCompareError) as bad_x:
            api.ingest(cid, x, [1.0, 2.0, 3.0])
        assert (bad_x.value.status, bad_x.value.code) == (None, "invalid_chunk")
        assert bad_x.value.message == ("x has nan at row 2, column 1 (counting from 0); JSON "
                                       "cannot carry NaN or infinity: drop or fix those rows")
        with pytest.raises(ModelCompareError) as bad_y:
            api.ingest(cid, np.zeros((2, 4)), [1.0, float("inf")])
        assert bad_y.value.details == {"field": "y", "row": 1, "value": "inf"}
        with pytest.raises(ModelCompareError):
            api.predict(cid, [[0.0, float("-inf"), 0.0, 0.0]])
        assert api.get_comparison(cid)["ingested"] == 0


def test_predict_answers_numpy_input_with_numpy_arrays(embedded_server: Server) -> None:
    x, y = regression_data(30, seed=8)
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        api.ingest(cid, x, y, wait=True)
        query = np.array([[0.5, -1.0, 2.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
        arrays, lists = api.predict(cid, query), api.predict(cid, query.tolist())
    assert isinstance(arrays["mixture"]["mean"], np.ndarray)
    assert arrays["mixture"]["mean"].shape == (2,) and arrays["mixture"]["probabilities"] is None
    assert isinstance(lists["mixture"]["mean"], list)
    np.testing.assert_array_equal(arrays["mixture"]["variance"], lists["mixture"]["variance"])
    for array_part, list_part in zip(arrays["models"], lists["models"], strict=True):
        np.testing.assert_array_equal(array_part["mean"], list_part["mean"])


def test_path_segments_are_encoded_dot_segments_too() -> None:
    """A name of dots alone would resolve away in the URL (…/models/.. is …/{id})."""
    assert [path_segment(v) for v in ("a.b", "a/b", ".", "..")] == ["a.b", "a%2Fb", "%2E",
                                                                      "%2E%2E"]
