"""Typed clients for the modelcompare HTTP API: ``Client`` (sync) and ``AsyncClient`` (asyncio).

Every route has one method, declared once with ``@endpoint`` and shared by both clients (they
differ only in how a request is sent). ``ENDPOINTS`` maps each method to its route; the tests
compare it with the app's routes, so a route without a client method fails them.

    with Client("http://127.0.0.1:8000") as api:
        cid = api.create_comparison({...})["id"]
        api.ingest(cid, x, y, wait=True)

Reads (GET, predict, expectation) and chunks are retried ``retries`` times on a connection error
or a 503, with backoff. A chunk always carries an ``Idempotency-Key`` (a fresh one when the
caller gives none) and every retry reuses it, so the server applies it once. When the retries
run out and the chunk's fate is unknown, the error says so and carries ``idempotency_key``:
send the chunk again with that key.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Concatenate, Generic, NamedTuple, ParamSpec, TypeVar
from urllib.parse import quote, urlencode

import httpx
import numpy as np
import websockets

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV, API_KEY_ENV = "MODELCOMPARE_URL", "MODELCOMPARE_API_KEY"
Rows = Sequence[Sequence[float]] | Any  # nested lists, or anything with .tolist() (numpy, torch)
Values = Sequence[float] | Any


class ModelCompareError(Exception):
    """An error reply of the API, with its ``{"error": {"code", "message", "details"}}``;
    ``status`` None when there was no reply, or the client refused to send (e.g. NaN in x).
    ``idempotency_key``: the key a failed chunk was sent with; send it again with that key."""

    def __init__(self, status: int | None, code: str, message: str, details: Any = None,
                 idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.idempotency_key = idempotency_key

    def __str__(self) -> str:
        where = "" if self.status is None else f" (HTTP {self.status})"
        return f"{self.code}: {self.message}{where}"


class ServerUnreachable(ModelCompareError):
    """No reply at all: the server is down, the URL is wrong, or the connection broke."""

    def __init__(self, url: str, reason: str, idempotency_key: str | None = None) -> None:
        super().__init__(None, "unreachable", f"cannot reach {url}: {reason}", {"url": url},
                         idempotency_key)


class Endpoint(NamedTuple):
    method: str  # GET, POST, DELETE, or WS for the websocket
    path: str  # the app's template, e.g. /v1/comparisons/{cid}/evidence


class Call(NamedTuple):
    """What a method adds to its endpoint: a JSON body, query parameters, headers; whether a
    connection error or 503 is retried (safe for reads, and for chunks thanks to their key);
    and a conversion of the decoded reply."""

    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None
    retry: bool = False
    convert: Callable[[Any], Any] | None = None


class Request(NamedTuple):
    method: str
    path: str  # template filled in with the (URL-quoted) path parameters
    call: Call


ENDPOINTS: dict[str, Endpoint] = {}

T = TypeVar("T")
P = ParamSpec("P")
Api = TypeVar("Api", bound="_Routes[Any]")


def endpoint(
    method: str, path: str
) -> Callable[[Callable[Concatenate[Api, P], Call]], Callable[Concatenate[Api, P], Any]]:
    """Register a method for ``method path``; it returns the ``Call``, the client sends it.
    Parameters named like the template's ``{placeholders}`` fill them in."""
    names = re.findall(r"{(\w+)}", path)

    def register(build: Callable[Concatenate[Api, P], Call]) -> Callable[Concatenate[Api, P], Any]:
        signature = inspect.signature(build)
        ENDPOINTS[build.__name__] = Endpoint(method, path)

        @functools.wraps(build)
        def send(self: Api, *args: P.args, **kwargs: P.kwargs) -> Any:
            bound = signature.bind(self, *args, **kwargs).arguments
            filled = path.format(**{n: quote(str(bound[n]), safe="") for n in names})
            call = build(self, *args, **kwargs)
            if method == "GET":
                call = call._replace(retry=True)
            return self._send(Request(method, filled, call))

        return send

    return register


def _rows(x: Rows | None, field: str = "x") -> list[list[float]] | None:
    if x is None:
        return None
    return _finite(x.tolist() if hasattr(x, "tolist") else [list(r) for r in x], field)


def _values(y: Values | None, field: str = "y") -> list[float] | None:
    if y is None:
        return None
    return _finite(y.tolist() if hasattr(y, "tolist") else list(y), field)


def _finite(data: list[Any], field: str) -> list[Any]:
    """``data``, unless it holds NaN or infinity, which JSON cannot carry: then the error names
    the first such row. (Ragged rows and non-numbers go to the server, which explains them.)"""
    try:
        array = np.asarray(data, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        return data
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        cell = f"row {where[0]}" + (f", column {where[1]}" if len(where) > 1 else "")
        raise ModelCompareError(
            None, "invalid_chunk", f"{field} has {array[where]} at {cell} (counting from 0); "
            "JSON cannot carry NaN or infinity: drop or fix those rows",
            {"field": field, "row": where[0], "value": str(array[where])})
    return data


def _arrays(reply: dict[str, Any]) -> dict[str, Any]:
    """A predict reply with its per-row lists (mixture and each model's) as numpy arrays."""

    def convert(part: dict[str, Any] | None) -> dict[str, Any] | None:
        if part is None:
            return None
        return {k: np.asarray(v, dtype=np.float64) if k in PREDICTION_FIELDS and v is not None
                else v for k, v in part.items()}

    return {**reply, "mixture": convert(reply["mixture"]),
            "models": [convert(m) for m in reply["models"]]}


PREDICTION_FIELDS = ("mean", "variance", "probabilities", "log_density")


def _error(status: int, body: bytes) -> ModelCompareError:
    """The API's ``{"error": {...}}``, or the body as the message when it is something else."""
    try:
        error = json.loads(body)["error"]
        return ModelCompareError(status, error["code"], error["message"], error.get("details"))
    except (ValueError, KeyError, TypeError):
        return ModelCompareError(status, "http_error", body.decode(errors="replace").strip()
                                 or f"HTTP {status}")


def _decode(response: httpx.Response, call: Call) -> Any:
    """JSON for JSON replies, None for 204, text otherwise (Prometheus metrics)."""
    if response.is_error:
        raise _error(response.status_code, response.content)
    if response.status_code == 204:
        return None
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json() if call.convert is None else call.convert(response.json())
    return response.text


class Retry(NamedTuple):
    """A failure worth retrying (``call.retry``), raised as ``error`` once retries run out."""

    error: ModelCompareError
    delay: float  # seconds to wait first: the server's Retry-After, or the backoff


RETRY_DELAY = 0.25  # seconds before the first retry; doubled each time
MAX_RETRY_AFTER = 5.0  # seconds: a longer Retry-After is capped


def _outcome(url: str, call: Call, attempt: int, response: httpx.Response | None = None,
             failure: httpx.TransportError | None = None) -> Any:
    """The decoded reply, or ``Retry`` for a connection error or 503 of a retried call. A chunk
    (it has an Idempotency-Key) whose fate is unknown gets an error that says so."""
    key = (call.headers or {}).get("Idempotency-Key")
    backoff = RETRY_DELAY * 2**attempt
    if failure is not None:
        error: ModelCompareError = ServerUnreachable(url, str(failure) or type(failure).__name__,
                                                     key)
        unsent = isinstance(failure, httpx.ConnectError | httpx.ConnectTimeout)
    else:
        assert response is not None
        if response.status_code != 503 or not call.retry:
            return _decode(response, call)
        error, unsent = _error(503, response.content), False
        error.idempotency_key = key
        after = response.headers.get("Retry-After", "")
        backoff = min(float(after), MAX_RETRY_AFTER) if after.isdigit() else backoff
    if key is not None:
        fate = "it was not sent" if unsent else (
            "the outcome is unknown: the chunk may or may not have been accepted")
        error.message += (f"; {fate}. Send it again with idempotency_key={key!r} (header "
                          "Idempotency-Key): the server applies a chunk once per key")
    if not call.retry:
        raise error
    return Retry(error, backoff)


class _Routes(Generic[T]):
    """The API's routes. ``T`` is what sending returns: the decoded reply (``Client``) or an
    awaitable of it (``AsyncClient``)."""

    def __init__(self, url: str | None, api_key: str | None, retries: int) -> None:
        self.retries = retries
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.api_key = api_key or os.environ.get(API_KEY_ENV) or None
        self.headers = {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def _send(self, request: Request) -> T:
        raise NotImplementedError

    @endpoint("POST", "/v1/comparisons")
    def create_comparison(self, spec: Mapping[str, Any]) -> Call:
        """Create: ``{"name", "models": [{"name", "family", "config"}], "estimator", "seed"}``."""
        return Call(json=spec)

    @endpoint("GET", "/v1/comparisons")
    def list_comparisons(self) -> Call:
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}")
    def get_comparison(self, cid: str) -> Call:
        return Call()

    @endpoint("DELETE", "/v1/comparisons/{cid}")
    def delete_comparison(self, cid: str) -> Call:
        return Call()

    @endpoint("POST", "/v1/comparisons/{cid}/models")
    def add_model(self, cid: str, model: Mapping[str, Any]) -> Call:
        """Add a model mid-stream; it replays the stored history (``catching_up`` until then)."""
        return Call(json=model)

    @endpoint("POST", "/v1/comparisons/{cid}/chunks")
    def ingest(self, cid: str, x: Rows | None = None, y: Values | None = None, *,
               idempotency_key: str | None = None, wait: bool = False) -> Call:
        """Queue a chunk (``{"sequence", "rows", "duplicate"}``); ``wait=True``: the evidence
        once it is applied (or ``"processed": false`` when the server's wait times out). The
        ``Idempotency-Key`` is ``idempotency_key``, or a fresh one; retries reuse it."""
        body = {k: v for k, v in (("x", _rows(x)), ("y", _values(y))) if v is not None}
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return Call(json=body, params={"wait": "true"} if wait else None, headers=headers,
                    retry=True)

    @endpoint("GET", "/v1/comparisons/{cid}/evidence")
    def evidence(self, cid: str) -> Call:
        """Per model log Z ± stderr, n, ESS, P(model | data); version, sequence, status."""
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/weights")
    def weights(self, cid: str) -> Call:
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/history")
    def history(self, cid: str) -> Call:
        """The evidence trace per model: one point per applied chunk."""
        return Call()

    @endpoint("POST", "/v1/comparisons/{cid}/predict")
    def predict(self, cid: str, x: Rows | None = None) -> Call:
        """The BMA predictive at ``x`` with each model's part; numpy arrays for numpy ``x``."""
        return Call(json={"x": _rows(x)}, retry=True,
                    convert=_arrays if isinstance(x, np.ndarray) else None)

    @endpoint("POST", "/v1/comparisons/{cid}/expectation")
    def expectation(self, cid: str, model: str, functional: str, x: Rows | None = None, *,
                    repetitions: int = 100, alpha: float = 0.5, seed: int | None = None) -> Call:
        """Debiased posterior expectation of one model: ``functional`` ``"mean"``,
        ``"second_moment"`` or ``"predictive"`` (at ``x``), with its standard error."""
        return Call(json={"model": model, "functional": functional, "x": _rows(x),
                          "repetitions": repetitions, "alpha": alpha, "seed": seed}, retry=True)

    @endpoint("GET", "/v1/comparisons/{cid}/dead-letters")
    def dead_letters(self, cid: str, limit: int = 100) -> Call:
        """Chunks given up on (poison), oldest first, and where processing is halted."""
        return Call(params={"limit": limit})

    @endpoint("POST", "/v1/comparisons/{cid}/resume")
    def resume(self, cid: str, action: str) -> Call:
        """Un-halt a comparison: ``"retry"`` the halted chunk or ``"skip"`` it."""
        return Call(json={"action": action})

    @endpoint("GET", "/healthz")
    def healthz(self) -> Call:
        return Call()

    @endpoint("GET", "/readyz")
    def readyz(self) -> Call:
        return Call()

    @endpoint("GET", "/metrics")
    def metrics(self) -> Call:
        """Prometheus metrics, as text."""
        return Call()


class Client(_Routes[Any]):
    """Blocking client; methods return the decoded reply and raise ``ModelCompareError``."""

    def __init__(self, url: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, retries: int = 3) -> None:
        super().__init__(url, api_key, retries)
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def _send(self, request: Request) -> Any:
        method, path, call = request
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, json=call.json, params=call.params,
                                              headers=call.headers)
            except httpx.TransportError as exc:
                outcome = _outcome(self.url, call, attempt, failure=exc)
            else:
                outcome = _outcome(self.url, call, attempt, response=response)
            if not isinstance(outcome, Retry):
                return outcome
            if attempt < self.retries:
                time.sleep(outcome.delay)
        raise outcome.error

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Routes[Awaitable[Any]]):
    """Asyncio client: the same methods, awaited, plus ``updates`` over the websocket."""

    def __init__(self, url: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, retries: int = 3) -> None:
        super().__init__(url, api_key, retries)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout)

    async def _send(self, request: Request) -> Any:
        method, path, call = request
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, json=call.json,
                                                     params=call.params, headers=call.headers)
            except httpx.TransportError as exc:
                outcome = _outcome(self.url, call, attempt, failure=exc)
            else:
                outcome = _outcome(self.url, call, attempt, response=response)
            if not isinstance(outcome, Retry):
                return outcome
            if attempt < self.retries:
                await asyncio.sleep(outcome.delay)
        raise outcome.error

    async def updates(self, cid: str) -> AsyncIterator[dict[str, Any]]:
        """Websocket messages: ``{"type": "snapshot", "evidence"}`` first, then one
        ``{"type": "update", "evidence"}`` per applied chunk (rising versions); the iterator
        ends after ``{"type": "deleted"}``. An unknown id raises ``ModelCompareError`` (404)."""
        query = "" if self.api_key is None else "?" + urlencode({"token": self.api_key})
        url = re.sub(r"^http", "ws", self.url) + _ws_path(cid) + query
        try:
            async with websockets.connect(url, max_size=None) as socket:
                async for raw in socket:
                    message = json.loads(raw)
                    if message["type"] == "error":
                        error = message["error"]
                        raise ModelCompareError(404, error["code"], error["message"],
                                                error.get("details"))
                    yield message
                    if message["type"] == "deleted":
                        return
        except websockets.InvalidStatus as exc:
            raise _error(exc.response.status_code, exc.response.body or b"") from None
        except (OSError, websockets.ConnectionClosedError) as exc:
            raise ServerUnreachable(self.url, str(exc) or type(exc).__name__) from None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


ENDPOINTS["updates"] = Endpoint("WS", "/v1/comparisons/{cid}/ws")


def _ws_path(cid: str) -> str:
    return ENDPOINTS["updates"].path.format(cid=quote(cid, safe=""))
