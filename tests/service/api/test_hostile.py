"""Hostile input beyond single bad values: bodies too large or too deep, extreme magnitudes, odd
names, deleted comparisons, concurrent create/delete/ingest, and no pickle in stored state."""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from service_helpers import assert_error, comparison_body
from service_server import Server, StartServer, snapshot

from modelcompare.service.store.keys import Keys, index_key

ROOT = Path(__file__).resolve().parents[3]


def _finite_json(text: str) -> Any:
    """Parse, failing on NaN or ±Infinity anywhere."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in an API response")

    return json.loads(text, parse_constant=refuse)


def test_bodies_too_large_are_413_before_being_read(start_server: StartServer) -> None:
    server = start_server("local", max_body_bytes=2000)
    host, port = server.url.removeprefix("http://").split(":")
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = snapshot(server, cid)
        # A declared length over the limit is refused before any body byte is sent.
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"POST /v1/comparisons/{cid}/chunks HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
                         .encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 413")

        def stream(size: int) -> Iterator[bytes]:  # chunked transfer: no Content-Length
            yield b'{"x": [' + b"[0.0, 0.0, 0.0, 0.0], " * (size // 22) + b'[0.0, 0.0, 0.0, 0.0]]'
            yield b', "y": [0.0]}'

        for path in (f"/v1/comparisons/{cid}/chunks", f"/v1/comparisons/{cid}/predict",
                     f"/v1/comparisons/{cid}/models", "/v1/comparisons"):
            declared = client.post(path, content=b" " * 3000,
                                   headers={"content-type": "application/json"})
            assert_error(declared, 413, "too_large")
            chunked = client.post(path, content=stream(5000),
                                  headers={"content-type": "application/json"})
            assert_error(chunked, 413, "too_large")
        small = client.post(f"/v1/comparisons/{cid}/chunks", content=stream(100),
                            headers={"content-type": "application/json"})
        assert small.status_code == 422  # under the limit it is read, and y has 1 row, x 5
        assert snapshot(server, cid) == before


def test_deeply_nested_json_is_a_client_error_everywhere(start_server: StartServer) -> None:
    server = start_server("local")
    deep = "[" * 100_000 + "]" * 100_000
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = snapshot(server, cid)
        for path, body in ((f"/v1/comparisons/{cid}/chunks", f'{{"x": {deep}}}'),
                           (f"/v1/comparisons/{cid}/predict", f'{{"x": {deep}}}'),
                           (f"/v1/comparisons/{cid}/models", f'{{"name": {deep}}}'),
                           ("/v1/comparisons", f'{{"name": "n", "models": {deep}}}')):
            response = client.post(path, content=body,
                                   headers={"content-type": "application/json"})
            assert response.status_code in (400, 422), (path, response.text)
            assert_error(response, response.status_code)
        assert snapshot(server, cid) == before


@pytest.mark.slow
def test_extreme_but_finite_data_gives_finite_evidence_or_a_clean_rejection(
    start_server: StartServer,
) -> None:
    """y = 1e12 is accepted and every number the API returns stays finite (exact and SG-AIS);
    beyond ±1e100 values are refused at the door, so no model's evidence can overflow."""
    server = start_server("embedded")
    models = [{"name": "a", "family": "linear_regression", "config": {"dim": 2}}]
    with server.client() as client:
        for estimator in ({"method": "exact"}, {"method": "sgais", "particles": 16}):
            body = {"name": "extreme", "models": models, "estimator": estimator}
            cid = client.post("/v1/comparisons", json=body).json()["id"]
            for y in (1e12, -1e12, 1e-300):
                chunk = {"x": [[1.0, -2.0], [0.5, 1e6]], "y": [y, -y]}
                response = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
                assert response.status_code == 200, response.text
                evidence = _finite_json(response.text)
                assert evidence["status"] == "ok", evidence["status_reason"]
                assert all(math.isfinite(m["log_evidence"]) for m in evidence["models"])
            for path in ("evidence", "weights", "history"):
                _finite_json(client.get(f"/v1/comparisons/{cid}/{path}").text)
            predict = client.post(f"/v1/comparisons/{cid}/predict", json={"x": [[1e99, 1e99]]})
            _finite_json(predict.text)
            for value in (1e101, 1e300, -1.7e308):
                rejected = client.post(f"/v1/comparisons/{cid}/chunks",
                                       json={"x": [[1.0, value]], "y": [1.0]})
                assert_error(rejected, 422, "invalid_chunk")
            assert client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] == 3


def test_odd_unicode_names_round_trip_or_are_refused_by_the_documented_rule(
    start_server: StartServer,
) -> None:
    server = start_server("local")
    models = [{"name": "m-1.x_y", "family": "beta_bernoulli"}]
    with server.client() as client:
        for name in ("\u202eevil\u202c", "nul\u0000byte", "../../etc"):  # docs/guide/api.md
            refused = client.post("/v1/comparisons", json={"name": name, "models": models})
            assert_error(refused, 422, "invalid_request")
        for name in ("名前 🚀", "e\u0301", "n" * 200, "{cmp:x}:*"):
            created = client.post("/v1/comparisons", json={"name": name, "models": models,
                                                           "estimator": {"method": "exact"}})
            assert created.status_code == 201, created.text
            cid = created.json()["id"]
            assert client.get(f"/v1/comparisons/{cid}").json()["name"] == name
            response = client.post(f"/v1/comparisons/{cid}/chunks", json={"y": [1, 0]},
                                   headers={"Idempotency-Key": "ключ".encode()})
            assert response.status_code == 202, response.text
        for model_name in ("modèle", "a/b", "a b", "", "x" * 65, "\u0000"):
            body = {"name": "n", "models": [{"name": model_name, "family": "beta_bernoulli"}]}
            assert_error(client.post("/v1/comparisons", json=body), 422, "invalid_request")
        for path in ("/v1/comparisons/%00", "/v1/comparisons/%F0%9F%9A%80/evidence",
                     "/v1/comparisons/..%2F..%2Fx", "/v1/comparisons/*/evidence"):
            assert_error(client.get(path), 404, "not_found")
        def ids() -> list[str]:  # not the whole listing: the worker is still applying chunks
            return sorted(c["id"] for c in client.get("/v1/comparisons").json()["comparisons"])

        before = ids()
        for glob in ("*", "?" * 32, "[0-9a-f]*", "*}:*"):  # ids end up in Redis SCAN patterns
            assert_error(client.delete(f"/v1/comparisons/{quote(glob, safe='')}"), 404,
                         "not_found")
        assert ids() == before and len(before) == 4


def test_a_deleted_comparison_takes_nothing_and_leaves_no_keys(start_server: StartServer) -> None:
    server = start_server("local")
    store = server.redis()
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        chunk = {"x": [[0.1, 0.2, 0.3, 0.4]], "y": [1.0]}
        assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).status_code \
            == 200
        assert client.delete(f"/v1/comparisons/{cid}").status_code == 204
        for method, path, body in (
            ("POST", "chunks", chunk), ("POST", "models",
                                        {"name": "m", "family": "beta_bernoulli"}),
            ("POST", "predict", {"x": [[0.1, 0.2, 0.3, 0.4]]}), ("GET", "evidence", None),
            ("GET", "weights", None), ("GET", "history", None),
        ):
            assert_error(client.request(method, f"/v1/comparisons/{cid}/{path}", json=body),
                         404, "not_found")
        assert_error(client.delete(f"/v1/comparisons/{cid}"), 404, "not_found")
    assert list(store.scan_iter(match=Keys(server.settings.key_prefix, cid).pattern)) == []
    assert store.smembers(index_key(server.settings.key_prefix)) == set()


@pytest.mark.slow
def test_concurrent_create_ingest_delete_and_reads(start_server: StartServer) -> None:
    """Four clients create, ingest into and delete comparisons while a fifth lists and reads
    them: every answer is a 2xx or a clean 404, and deleted comparisons leave no keys behind."""
    server = start_server("local")
    allowed = {200, 201, 202, 204, 404}
    statuses: list[int] = []
    deleted: list[str] = []
    stop = threading.Event()
    chunk = {"x": [[0.1, 0.2, 0.3, 0.4]] * 5, "y": [1.0] * 5}

    def churn() -> None:
        with server.client() as client:
            for _ in range(6):
                response = client.post("/v1/comparisons", json=comparison_body())
                statuses.append(response.status_code)
                cid = response.json()["id"]
                for _ in range(3):
                    statuses.append(client.post(f"/v1/comparisons/{cid}/chunks",
                                                json=chunk).status_code)
                statuses.append(client.delete(f"/v1/comparisons/{cid}").status_code)
                statuses.append(client.post(f"/v1/comparisons/{cid}/chunks",
                                            json=chunk).status_code)
                deleted.append(cid)

    def read() -> None:
        with server.client() as client:
            while not stop.is_set():
                listing = client.get("/v1/comparisons")
                statuses.append(listing.status_code)
                for item in listing.json()["comparisons"]:
                    for path in ("", "/evidence", "/history", "/weights"):
                        statuses.append(client.get(f"/v1/comparisons/{item['id']}{path}")
                                        .status_code)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    reader = threading.Thread(target=read)
    for thread in [*threads, reader]:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    reader.join()
    assert set(statuses) <= allowed, sorted(set(statuses) - allowed)
    assert len(deleted) == 24
    store = server.redis()
    prefix = server.settings.key_prefix
    deadline = time.monotonic() + 10  # a worker may still be finishing an applied chunk
    while list(store.scan_iter(match=f"{prefix}:{{cmp:*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = sorted(k.decode() for k in store.scan_iter(match=f"{prefix}:{{cmp:*"))
    assert leftover == []
    assert store.smembers(index_key(prefix)) == set()


def test_stored_state_has_no_pickle(server: Server) -> None:
    """Every stored value is JSON, safetensors or the documented float64 row blocks; the code
    never calls pickle (or torch.save/load, which pickle)."""
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("sgais", particles=16)).json()[
            "id"]
        chunk = {"x": [[0.1, 0.2, 0.3, 0.4]] * 5, "y": [1.0] * 5}
        assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).status_code \
            == 200
    store = server.redis()
    keys = Keys(server.settings.key_prefix, cid)
    for name, data in store.hgetall(keys.states).items():
        assert set(load_safetensors(data)), name  # parses as safetensors (no code execution)
    values = [*store.hgetall(keys.meta).values(), store.get(keys.evidence),
              *store.lrange(keys.trace, 0, -1), *store.lrange(keys.blocks, 0, -1),
              *(v for _, fields in store.xrange(keys.stream) for v in fields.values())]
    for value in values:
        assert not re.match(rb"\x80[\x02-\x05]", value), value[:20]  # pickle protocol 2-5
    for folder in ("service", "estimators", "models"):
        for path in (ROOT / folder).rglob("*.py"):
            source = path.read_text()
            for banned in ("import pickle", "from pickle", "torch.load(", "torch.save(",
                           "import dill", "import marshal", "import shelve"):
                assert banned not in source, f"{path}: {banned}"


def test_bad_content_length_and_methods_are_4xx(start_server: StartServer) -> None:
    server = start_server("embedded")
    with server.client() as client:
        for method in ("PUT", "PATCH"):
            assert_error(client.request(method, "/v1/comparisons"), 405, "method_not_allowed")
        response = client.get("/v1/comparisons/x/evidence/../../..")
        assert 400 <= response.status_code < 500
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
        assert re.match(rb"HTTP/1.1 4\d\d", sock.recv(4096))
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/healthz").status_code == 200  # still serving


@pytest.mark.slow
def test_a_degenerate_stored_state_fails_its_model_not_the_request(
    start_server: StartServer,
) -> None:
    """A state that cannot predict (here: zero posterior precision) is reported as that model's
    error by predict, while the other models still answer."""
    server = start_server("local")
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        store = server.redis()
        states = Keys(server.settings.key_prefix, cid).states
        tensors = load_safetensors(store.hget(states, "right"))
        tensors["stats"] = torch.zeros_like(tensors["stats"])
        store.hset(states, "right", save_safetensors(tensors))
        response = client.post(f"/v1/comparisons/{cid}/predict",
                               json={"x": [[0.1, 0.2, 0.3, 0.4]]})
        assert response.status_code == 200, response.text
        parts = {p["name"]: p for p in _finite_json(response.text)["models"]}
        assert "error" in parts["right"] and "error" not in parts["too_few"]
        assert parts["too_few"]["mean"] and _finite_json(response.text)["mixture"]["mean"]
