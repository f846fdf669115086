"""API keys: the access-control matrix over real HTTP and websockets, every protected route,
the public ones, and the key format (digests, scopes)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
import yaml
from service_helpers import assert_error, comparison_body
from service_server import Server, StartServer, snapshot
from starlette.datastructures import Headers

from modelcompare.service.api.deps import protected
from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings
from modelcompare.service.core.security import Keyring, KeyScope, bearer_token

ROOT = Path(__file__).resolve().parents[3]
HASHED = "hashed-key-0123456789"
KEYS: dict[str, dict[str, list[str]]] = {
    "admin": {"read": ["*"], "write": ["*"]},
    "reader": {"read": ["*"]},
    "team": {"read": ["team-*"], "write": ["team-*"]},
    "producer": {"write": ["team-a"]},  # may ingest into team-a, not read it
}
CALLERS = ["none", "wrong", "admin", "reader", "team", "by_id", "hashed", "producer"]
CHUNK = {"x": [[0.1, 0.2, 0.3, 0.4]], "y": [1.0]}
PREDICT = {"x": [[0.1, 0.2, 0.3, 0.4]]}

# (label, method, path, body, status per caller in CALLERS order). {a}: "team-a", {b}: "other";
# the by_id key reads "other" by its id; the hashed key is configured as a sha256 digest and reads
# "team-a" by name. A restricted key gets 403 for an unknown id, exactly as for a forbidden one.
# A 409 is a granted request that finds nothing to do (no rows yet; not halted).
MATRIX: list[tuple[str, str, str, Any, list[int]]] = [
    ("describe a", "GET", "/v1/comparisons/{a}", None, [401, 401, 200, 200, 200, 403, 200, 403]),
    ("describe b", "GET", "/v1/comparisons/{b}", None, [401, 401, 200, 200, 403, 200, 403, 403]),
    ("evidence a", "GET", "/v1/comparisons/{a}/evidence", None,
     [401, 401, 200, 200, 200, 403, 200, 403]),
    ("weights b", "GET", "/v1/comparisons/{b}/weights", None,
     [401, 401, 200, 200, 403, 200, 403, 403]),
    ("history a", "GET", "/v1/comparisons/{a}/history", None,
     [401, 401, 200, 200, 200, 403, 200, 403]),
    ("dead letters b", "GET", "/v1/comparisons/{b}/dead-letters", None,
     [401, 401, 200, 200, 403, 200, 403, 403]),
    ("predict a (read)", "POST", "/v1/comparisons/{a}/predict", PREDICT,
     [401, 401, 200, 200, 200, 403, 200, 403]),
    ("expectation a (read)", "POST", "/v1/comparisons/{a}/expectation",
     {"model": "right", "functional": "mean", "repetitions": 2, "seed": 0},
     [401, 401, 409, 409, 409, 403, 409, 403]),
    ("resume b (not halted)", "POST", "/v1/comparisons/{b}/resume", {"action": "retry"},
     [401, 401, 409, 403, 403, 403, 403, 403]),
    ("deliveries b", "GET", "/v1/comparisons/{b}/deliveries", None,
     [401, 401, 200, 200, 403, 200, 403, 403]),
    ("webhook secret a (write)", "GET", "/v1/comparisons/{a}/webhook-secret", None,
     [401, 401, 200, 403, 200, 403, 403, 200]),
    ("unknown id", "GET", "/v1/comparisons/0123abcd", None,
     [401, 401, 404, 404, 403, 403, 403, 403]),
    ("metrics", "GET", "/metrics", None, [401, 401, 200, 200, 403, 403, 403, 403]),
    ("ingest a", "POST", "/v1/comparisons/{a}/chunks", CHUNK,
     [401, 401, 202, 403, 202, 403, 403, 202]),
    ("ingest b", "POST", "/v1/comparisons/{b}/chunks", CHUNK,
     [401, 401, 202, 403, 403, 403, 403, 403]),
    ("add model b", "POST", "/v1/comparisons/{b}/models",
     {"name": "extra", "family": "linear_regression", "config": {"dim": 1}},
     [401, 401, 201, 403, 403, 403, 403, 403]),
    ("create team-new", "POST", "/v1/comparisons", {**comparison_body(), "name": "team-new"},
     [401, 401, 201, 403, 201, 403, 403, 403]),
    ("create other-new", "POST", "/v1/comparisons", {**comparison_body(), "name": "other-new"},
     [401, 401, 201, 403, 403, 403, 403, 403]),
    ("delete b", "DELETE", "/v1/comparisons/{b}", None, [401, 401, 204, 403, 403, 403, 403, 403]),
]
PUBLIC = ["/healthz", "/readyz", "/", "/static/dashboard.js", "/openapi.json"]


def _headers(caller: str) -> dict[str, str]:
    if caller == "none":
        return {}
    return {"Authorization": f"Bearer {'not-a-key' if caller == 'wrong' else caller + '-key'}"}


def _keys(b_id: str) -> dict[str, Any]:
    keys: dict[str, Any] = {f"{name}-key": scope for name, scope in KEYS.items()}
    keys["by_id-key"] = {"read": [b_id]}
    keys[f"sha256:{hashlib.sha256(HASHED.encode()).hexdigest()}"] = {"read": ["team-a"]}
    return keys


@pytest.fixture
def secured(start_server: StartServer) -> tuple[Server, dict[str, str]]:
    """Comparisons "team-a" and "other" made without keys, then a server that requires them."""
    open_server = start_server("local")
    ids = {}
    with open_server.client() as client:
        for label, name in (("a", "team-a"), ("b", "other")):
            response = client.post("/v1/comparisons", json={**comparison_body(), "name": name})
            ids[label] = response.json()["id"]
    server = start_server("local", key_prefix=open_server.settings.key_prefix,
                          api_keys=_keys(ids["b"]))
    return server, ids


def _call(client: httpx.Client, caller: str, method: str, path: str, body: Any) -> httpx.Response:
    headers = _headers(caller)
    if caller == "hashed":
        headers = {"Authorization": f"Bearer {HASHED}"}
    return client.request(method, path, json=body, headers=headers)


@pytest.mark.slow
def test_access_control_matrix(secured: tuple[Server, dict[str, str]]) -> None:
    """Every denial is a JSON 401/403 that changes nothing; then every grant succeeds."""
    server, ids = secured
    before = {cid: snapshot(server, cid) for cid in ids.values()}
    seen: dict[tuple[str, str], int] = {}
    with server.client() as client:
        for label, method, path, body, statuses in MATRIX:
            for caller, status in zip(CALLERS, statuses, strict=True):
                if status in (401, 403):
                    response = _call(client, caller, method, path.format(**ids), body)
                    assert_error(response, status, {401: "unauthorized", 403: "forbidden"}[status])
                    seen[label, caller] = response.status_code
        assert {cid: snapshot(server, cid) for cid in ids.values()} == before
        for label, method, path, body, statuses in MATRIX:
            for caller, status in zip(CALLERS, statuses, strict=True):
                if status not in (401, 403):
                    response = _call(client, caller, method, path.format(**ids), body)
                    assert response.status_code == status, (label, caller, response.text)
                    seen[label, caller] = response.status_code
    expected = {(row[0], c): s for row in MATRIX for c, s in zip(CALLERS, row[4], strict=True)}
    assert seen == expected


def test_listing_shows_only_what_the_key_may_read(secured: tuple[Server, dict[str, str]]) -> None:
    server, _ = secured
    with server.client() as client:
        def names(caller: str) -> list[str]:
            response = _call(client, caller, "GET", "/v1/comparisons", None)
            assert response.status_code == 200, response.text
            return sorted(c["name"] for c in response.json()["comparisons"])

        assert names("admin") == names("reader") == ["other", "team-a"]
        assert names("team") == names("hashed") == ["team-a"]
        assert names("by_id") == ["other"]
        assert names("producer") == []
        assert_error(_call(client, "none", "GET", "/v1/comparisons", None), 401, "unauthorized")


def test_a_denial_reveals_nothing_about_other_comparisons(
    secured: tuple[Server, dict[str, str]],
) -> None:
    server, ids = secured
    with server.client() as client:
        existing = _call(client, "team", "GET", f"/v1/comparisons/{ids['b']}/evidence", None)
        unknown = _call(client, "team", "GET", "/v1/comparisons/ffff0000/evidence", None)
        assert existing.status_code == unknown.status_code == 403
        assert existing.json() == unknown.json()
        missing = _call(client, "none", "GET", "/v1/comparisons", None)
        assert missing.headers["www-authenticate"] == "Bearer"
        for scheme in ("Basic team-key", "Bearer", "Bearer x team-key", "team-key"):
            response = client.get("/v1/comparisons", headers={"Authorization": scheme})
            assert_error(response, 401, "unauthorized")
        lower = client.get("/v1/comparisons", headers={"Authorization": "bearer team-key"})
        assert lower.status_code == 200
        # ?token= is for websockets only: in an HTTP URL it would land in access logs.
        assert_error(client.get("/v1/comparisons?token=team-key"), 401, "unauthorized")
    assert "team-key" not in repr(server.settings)


@pytest.mark.slow
def test_every_protected_route_needs_a_key_and_public_ones_do_not(
    secured: tuple[Server, dict[str, str]],
) -> None:
    """HTTP routes are read from the app's OpenAPI schema, so a route added later is checked."""
    server, ids = secured
    paths = create_app(server.settings).openapi()["paths"]
    routes = [(method.upper(), path) for path, item in paths.items() if protected(path)
              for method in item]
    assert len(routes) >= 12
    for path, item in paths.items():  # documented for /docs' "Authorize" and generated clients
        for operation in item.values():
            assert (operation.get("security") == [{"apiKey": []}]) == protected(path), path
    before = snapshot(server, ids["a"])
    with server.client() as client:
        for method, path in routes:
            response = client.request(method, path.replace("{cid}", ids["a"]), json={})
            assert_error(response, 401, "unauthorized")
        for path in PUBLIC:
            assert client.get(path).status_code == 200, path
    assert snapshot(server, ids["a"]) == before

    async def handshake(path: str, **kwargs: Any) -> int | dict[str, Any]:
        try:
            async with websockets.connect(f"{server.ws_url}{path}", **kwargs) as ws:
                return dict(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    path = f"/v1/comparisons/{ids['a']}/ws"
    assert asyncio.run(handshake(path)) == 401
    assert asyncio.run(handshake(f"{path}?token=wrong")) == 401
    assert asyncio.run(handshake(path.replace(ids["a"], ids["b"]) + "?token=team-key")) == 403
    snap = asyncio.run(handshake(f"{path}?token=team-key"))
    assert isinstance(snap, dict) and snap["type"] == "snapshot"
    by_header = asyncio.run(handshake(path, additional_headers=_headers("team")))
    assert isinstance(by_header, dict) and by_header["type"] == "snapshot"


def test_cors_is_off_by_default_and_follows_the_setting(start_server: StartServer) -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    closed = start_server("embedded")
    with closed.client() as client:
        response = client.get("/healthz", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in response.headers
        assert "access-control-allow-origin" not in client.options(
            "/v1/comparisons", headers=preflight).headers
    opened = start_server("embedded", cors_origins=["https://app.example"])
    with opened.client() as client:
        response = client.options("/v1/comparisons", headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        other = client.options("/v1/comparisons", headers={**preflight, "Origin": "https://x.io"})
        assert "access-control-allow-origin" not in other.headers


def test_keys_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = hashlib.sha256(b"k" * 20).hexdigest()
    monkeypatch.setenv("MODELCOMPARE_API_KEYS", json.dumps(
        {"plain-key": {"read": ["*"]}, f"sha256:{digest}": {"write": ["team-*"]}}))
    monkeypatch.setenv("MODELCOMPARE_CORS_ORIGINS", '["https://app.example"]')
    settings = Settings()
    assert settings.cors_origins == ["https://app.example"]
    keyring = Keyring(settings.api_keys)
    assert keyring.identify("plain-key") == KeyScope(read=["*"])
    assert keyring.identify("k" * 20) == KeyScope(write=["team-*"])
    assert keyring.identify(f"sha256:{digest}") is None  # the digest itself is not a key
    assert keyring.identify("") is None and keyring.identify(None) is None
    monkeypatch.setenv("MODELCOMPARE_API_KEYS", '{"k": {"read": ["*"], "admin": true}}')
    with pytest.raises(ValueError, match="admin"):
        Settings()
    with pytest.raises(ValueError, match="64 hex"):
        Keyring({"sha256:abc": KeyScope()})


def test_scopes_match_ids_and_names_by_pattern() -> None:
    scope = KeyScope(read=["team-*", "0f0f*"], write=["team-a"])
    assert scope.allows("read", "ab12", "team-x") and scope.allows("read", "0f0f99", None)
    assert not scope.allows("read", "ab12", "other") and not scope.allows("read", None)
    assert scope.allows("write", "ab12", "team-a") and not scope.allows("write", "ab12", "team-b")
    assert not scope.everything("read") and KeyScope(read=["*"]).everything("read")
    assert bearer_token(Headers({"authorization": "Bearer abc"})) == "abc"
    assert bearer_token(Headers({"authorization": "Token abc"})) is None


def test_the_security_guide_example_is_a_valid_key_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    security = (ROOT / "docs" / "guide" / "security.md").read_text()
    (example,) = re.findall(r"```json\n(.*?)```", security, flags=re.DOTALL)
    monkeypatch.setenv("MODELCOMPARE_API_KEYS", example)
    keyring = Keyring(Settings().api_keys)
    assert keyring.identify("team-a-8e41b0c3") == KeyScope(read=["team-a-*"], write=["team-a-*"])


def test_compose_publishes_the_api_and_not_redis() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert "ports" not in services["redis"] and "network_mode" not in services["redis"]
    assert services["api"]["ports"] == ["8000:8000"]
    assert all("ports" not in services[name] for name in services if name != "api")
