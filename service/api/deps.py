"""Request dependencies (``Annotated`` aliases): settings, the store's doors (comparisons, dead
letters, rules and events, readiness), broadcaster, metrics, access; and ``authorize``, which
main.py puts on every router."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection, Request

from modelcompare.service.api.broadcast import Broadcaster
from modelcompare.service.api.errors import ApiError
from modelcompare.service.core.config import Settings
from modelcompare.service.core.security import ALL, Action, Keyring, KeyScope, bearer_token
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.comparisons import Comparisons, NotFound
from modelcompare.service.store.dead_letters import DeadLetters
from modelcompare.service.store.deliveries import Deliveries
from modelcompare.service.store.health import Readiness
from modelcompare.service.store.rules import Rules


def get_settings(connection: HTTPConnection) -> Settings:
    return connection.app.state.settings


def get_store(connection: HTTPConnection) -> Comparisons:
    return connection.app.state.store


def get_dead_letters(connection: HTTPConnection) -> DeadLetters:
    return connection.app.state.dead_letters


def get_rules(connection: HTTPConnection) -> Rules:
    return connection.app.state.rules


def get_deliveries(connection: HTTPConnection) -> Deliveries:
    return connection.app.state.deliveries


def get_readiness(connection: HTTPConnection) -> Readiness:
    return connection.app.state.readiness


def get_broadcaster(connection: HTTPConnection) -> Broadcaster:
    return connection.app.state.broadcaster


def get_metrics(connection: HTTPConnection) -> Metrics:
    return connection.app.state.metrics


def new_request_identity() -> str:
    """The identity a write request carries into Redis, so that a write re-sent after a lost
    reply is recognised as the same request (docs/design/exactly-once.md)."""
    return uuid.uuid4().hex


def get_access(connection: HTTPConnection) -> KeyScope:
    """The caller's scope (set by ``authorize``); everything when no keys are configured."""
    return getattr(connection.state, "access", ALL)


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Comparisons, Depends(get_store)]
DeadLettersDep = Annotated[DeadLetters, Depends(get_dead_letters)]
RulesDep = Annotated[Rules, Depends(get_rules)]
DeliveriesDep = Annotated[Deliveries, Depends(get_deliveries)]
ReadinessDep = Annotated[Readiness, Depends(get_readiness)]
BroadcasterDep = Annotated[Broadcaster, Depends(get_broadcaster)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
AccessDep = Annotated[KeyScope, Depends(get_access)]
RequestIdentity = Annotated[str, Depends(new_request_identity)]

COLLECTION = "/v1/comparisons"
# POST routes that change nothing: they need read access, like GET.
READ_ONLY_POSTS = frozenset({"/v1/comparisons/{cid}/predict", "/v1/comparisons/{cid}/expectation"})
# GET routes that reveal a secret (one that signs what the service sends): they need write access.
SECRET_GETS = frozenset({"/v1/comparisons/{cid}/webhook-secret"})


def protected(path: str) -> bool:
    """Comparison data lives under /v1 and in /metrics (labels carry ids); health checks, the
    dashboard page and its static files, and the OpenAPI docs hold none and stay public."""
    return path.startswith("/v1/") or path == "/metrics"


def _forbidden(action: Action) -> ApiError:
    # The same answer whether or not the comparison exists: a key learns nothing outside its scope.
    return ApiError(403, "forbidden", f"this API key may not {action} this resource")


async def authorize(connection: HTTPConnection) -> None:
    """401 without a known key, 403 outside its scope; GET (and the websocket) read, POST and
    DELETE write (but for the routes named above). Creating a comparison is writing its name;
    global routes need ``"*"``."""
    keyring: Keyring | None = connection.app.state.keyring
    route = connection.scope.get("route")
    path = getattr(route, "path", connection.url.path)
    if keyring is None or not protected(path):
        return
    websocket = connection.scope["type"] == "websocket"
    token = bearer_token(connection.headers)
    if token is None and websocket:  # browsers cannot set headers on a websocket
        token = connection.query_params.get("token")
    scope = keyring.identify(token)
    if scope is None:
        raise ApiError(401, "unauthorized", "a valid API key is needed: Authorization: Bearer "
                       "<key>", headers={"WWW-Authenticate": "Bearer"})
    connection.state.access = scope
    method = "GET" if websocket else connection.scope["method"]
    reads = method in ("GET", "HEAD") and path not in SECRET_GETS
    action: Action = "read" if reads or path in READ_ONLY_POSTS else "write"
    cid = connection.path_params.get("cid")
    if cid is not None:
        if scope.allows(action, cid):
            return
        try:
            name = (await get_store(connection).meta(cid)).spec.name
        except NotFound:
            raise _forbidden(action) from None
        if not scope.allows(action, name):
            raise _forbidden(action)
    elif path == COLLECTION and method == "GET":
        return  # the listing shows only what the key may read
    elif path == COLLECTION and method == "POST":
        if not scope.allows("write", await _requested_name(connection)):
            raise _forbidden(action)
    elif not scope.everything(action):
        raise _forbidden(action)


async def _requested_name(connection: HTTPConnection) -> str | None:
    """The ``name`` of a create request (FastAPI has read and JSON-parsed the body already)."""
    if not isinstance(connection, Request):
        return None
    try:
        body = json.loads(await connection.body())
    except (ValueError, RecursionError):
        return None
    name = body.get("name") if isinstance(body, dict) else None
    return name if isinstance(name, str) else None
