"""What a client method sends and how its reply (or failure) is read: the route registry,
the request parts, JSON checks of the values sent, and the retry rule."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, TypeVar
from urllib.parse import quote

import httpx
import numpy as np

from modelcompare.service.client.errors import ModelCompareError, ServerUnreachable, reply_error
from modelcompare.service.client.frames import Frame, frame_table

if TYPE_CHECKING:
    from modelcompare.service.client.routes import Routes

Rows = Sequence[Sequence[float]] | Any  # nested lists, or anything with .tolist() (numpy, torch)
Values = Sequence[float] | Any


class Endpoint(NamedTuple):
    method: str  # GET, POST, DELETE, or WS for the websocket
    path: str  # the app's template, e.g. /v1/comparisons/{cid}/evidence


class Call(NamedTuple):
    """What a method adds to its endpoint: a JSON body or another body (``content``, its type
    in ``headers``), query parameters, headers; whether a connection error or 503 is retried
    (safe for reads, and for chunks thanks to their key); and a conversion of the decoded
    reply."""

    json: Any = None
    content: bytes | None = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None
    retry: bool = False
    convert: Callable[[Any], Any] | None = None


class Request(NamedTuple):
    method: str
    path: str  # template filled in with the (URL-quoted) path parameters
    call: Call


ENDPOINTS: dict[str, Endpoint] = {}

P = ParamSpec("P")
Api = TypeVar("Api", bound="Routes[Any]")


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
            filled = path.format(**{n: path_segment(str(bound[n])) for n in names})
            call = build(self, *args, **kwargs)
            if method == "GET":
                call = call._replace(retry=True)
            return self.send(Request(method, filled, call))

        return send

    return register


def path_segment(value: str) -> str:
    """``value`` percent-encoded as one path segment, "." and ".." too, which a URL would
    otherwise resolve away: new model names may not be dots alone, but a comparison created
    before that rule may hold one."""
    if value.strip(".") == "":
        return "%2E" * len(value)
    return quote(value, safe="")


def rows_json(x: Rows | None, field: str = "x") -> list[list[float]] | None:
    if x is None:
        return None
    return _finite(x.tolist() if hasattr(x, "tolist") else [list(r) for r in x], field)


def values_json(y: Values | None, field: str = "y") -> list[float] | None:
    if y is None:
        return None
    return _finite(y.tolist() if hasattr(y, "tolist") else list(y), field)


def columns_json(frame: Frame) -> dict[str, list[Any]]:
    """A frame as the JSON ``columns`` form: ``{name: [value per row]}``."""
    return {name: _finite(values, name) for name, values in frame_table(frame).to_pydict().items()}


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


def as_arrays(reply: dict[str, Any]) -> dict[str, Any]:
    """A predict reply with its per-row lists (mixture and each model's) as numpy arrays."""

    def convert(part: dict[str, Any] | None) -> dict[str, Any] | None:
        if part is None:
            return None
        return {k: np.asarray(v, dtype=np.float64) if k in PREDICTION_FIELDS and v is not None
                else v for k, v in part.items()}

    return {**reply, "mixture": convert(reply["mixture"]),
            "models": [convert(m) for m in reply["models"]]}


PREDICTION_FIELDS = ("mean", "variance", "probabilities", "log_density")


def decode(response: httpx.Response, call: Call) -> Any:
    """JSON for JSON replies, None for 204, text otherwise (Prometheus metrics)."""
    if response.is_error:
        raise reply_error(response.status_code, response.content)
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


def outcome(url: str, call: Call, attempt: int, response: httpx.Response | None = None,
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
            return decode(response, call)
        error, unsent = reply_error(503, response.content), False
        error.idempotency_key = key
        after = response.headers.get("Retry-After", "")
        backoff = min(float(after), MAX_RETRY_AFTER) if after.isdigit() else backoff
    if key is not None:
        error.outcome_unknown = not unsent
        fate = "it was not sent" if unsent else (
            "the outcome is unknown: the chunk may or may not have been accepted")
        error.message += (f"; {fate}. Send it again with idempotency_key={key!r} (header "
                          "Idempotency-Key): the server applies a chunk once per key")
    if not call.retry:
        raise error
    return Retry(error, backoff)
