"""The API's routes, one method each, shared by ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np

from modelcompare.service.client.calls import (
    Call,
    Request,
    Rows,
    Values,
    as_arrays,
    columns_json,
    endpoint,
    rows_json,
    values_json,
)
from modelcompare.service.client.frames import ARROW_STREAM, Frame, arrow_stream, is_frame

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV, API_KEY_ENV = "MODELCOMPARE_URL", "MODELCOMPARE_API_KEY"
T = TypeVar("T")


class Routes(Generic[T]):
    """The API's routes. ``T`` is what sending returns: the decoded reply (``Client``) or an
    awaitable of it (``AsyncClient``)."""

    def __init__(self, url: str | None, api_key: str | None, retries: int) -> None:
        self.retries = retries
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.api_key = api_key or os.environ.get(API_KEY_ENV) or None
        self.headers = {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def send(self, request: Request) -> T:
        """Send one request with the retry rule of ``calls.outcome``; each client says how."""
        raise NotImplementedError

    @endpoint("POST", "/v1/comparisons")
    def create_comparison(self, spec: Mapping[str, Any]) -> Call:
        """Create: ``{"name", "models": [{"name", "family", "config"}], "estimator", "seed"}``."""
        return Call(json=spec)

    @endpoint("GET", "/v1/comparisons")
    def list_comparisons(self, limit: int | None = None, cursor: str | None = None) -> Call:
        """One page, newest first: ``{"comparisons", "next_cursor"}``. Pass ``next_cursor`` as
        ``cursor`` for the next page (null at the end); ``limit`` per page (server default 50,
        at most 500). ``iter_comparisons`` follows the pages."""
        params = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return Call(params=params or None)

    @endpoint("GET", "/v1/families")
    def families(self) -> Call:
        """The model families the server can build: ``{"families": [{"family", "package",
        "version", "description", "config_schema"}], "unavailable": {name: why}}``."""
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

    @endpoint("DELETE", "/v1/comparisons/{cid}/models/{name}")
    def remove_model(self, cid: str, name: str) -> Call:
        """Remove a model (``{"model", "evidence"}``): it leaves the probabilities; the others'
        states are untouched."""
        return Call()

    @endpoint("POST", "/v1/comparisons/{cid}/chunks")
    def ingest(self, cid: str, x: Rows | Frame | None = None, y: Values | None = None, *,
               idempotency_key: str | None = None, wait: bool = False) -> Call:
        """Queue a chunk (``{"sequence", "rows", "duplicate"}``): rows ``x`` with targets ``y``,
        or for a comparison by formula a data frame (pandas, Polars, pyarrow, or anything with
        ``__arrow_c_stream__`` / ``__dataframe__``) holding its columns by name, target
        included, sent as an Arrow IPC stream. ``wait=True``: the evidence once it is applied
        (or ``"processed": false`` when the server's wait times out). The ``Idempotency-Key``
        is ``idempotency_key``, or a fresh one; retries reuse it."""
        params = {"wait": "true"} if wait else None
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        if is_frame(x):
            if y is not None:
                raise TypeError("a data frame holds its target as a named column: leave out y")
            return Call(content=arrow_stream(x), params=params, retry=True,
                        headers={**headers, "Content-Type": ARROW_STREAM})
        body = {k: v for k, v in (("x", rows_json(x)), ("y", values_json(y))) if v is not None}
        return Call(json=body, params=params, headers=headers, retry=True)

    @endpoint("GET", "/v1/comparisons/{cid}/evidence")
    def evidence(self, cid: str) -> Call:
        """Per model log Z ± stderr, n, ESS, P(model | data), ``window``: log p(last W rows |
        earlier rows) ± stderr with the windowed log Bayes factor vs the best model, and
        ``reliability`` (false for good once the model's SGHMC moves diverged); version,
        sequence, status."""
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/weights")
    def weights(self, cid: str) -> Call:
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/history")
    def history(self, cid: str) -> Call:
        """The evidence trace per model: one point per applied chunk."""
        return Call()

    @endpoint("POST", "/v1/comparisons/{cid}/predict")
    def predict(self, cid: str, x: Rows | Frame | None = None) -> Call:
        """The BMA predictive at ``x`` (rows, or a data frame of named inputs as for
        ``ingest``) with each model's part; numpy arrays for numpy ``x`` or a frame."""
        if is_frame(x):
            return Call(content=arrow_stream(x), headers={"Content-Type": ARROW_STREAM},
                        retry=True, convert=as_arrays)
        return Call(json={"x": rows_json(x)}, retry=True,
                    convert=as_arrays if isinstance(x, np.ndarray) else None)

    @endpoint("POST", "/v1/comparisons/{cid}/expectation")
    def expectation(self, cid: str, model: str, functional: str, x: Rows | Frame | None = None,
                    *, repetitions: int = 100, alpha: float = 0.5,
                    seed: int | None = None) -> Call:
        """Debiased posterior expectation of one model: ``functional`` ``"mean"``,
        ``"second_moment"`` or ``"predictive"`` (at ``x``: rows, or a data frame of named
        inputs), with its standard error."""
        rows = {"columns": columns_json(x)} if is_frame(x) else {"x": rows_json(x)}
        return Call(json={"model": model, "functional": functional, **rows,
                          "repetitions": repetitions, "alpha": alpha, "seed": seed}, retry=True)

    @endpoint("GET", "/v1/comparisons/{cid}/dead-letters")
    def dead_letters(self, cid: str, limit: int = 100) -> Call:
        """Chunks given up on (poison), oldest first, and where processing is halted."""
        return Call(params={"limit": limit})

    @endpoint("POST", "/v1/comparisons/{cid}/resume")
    def resume(self, cid: str, action: str) -> Call:
        """Un-halt a comparison: ``"retry"`` the halted chunk or ``"skip"`` it."""
        return Call(json={"action": action})

    @endpoint("POST", "/v1/comparisons/{cid}/rules")
    def add_rule(self, cid: str, rule: Mapping[str, Any]) -> Call:
        """Add a decision rule, e.g. ``{"name": "promote", "when": {"log_bayes_factor":
        {"model": "b", "against": "a", "above": 3.0}}, "for_chunks": 2}``
        (docs/guide/decisions.md)."""
        return Call(json=rule)

    @endpoint("GET", "/v1/comparisons/{cid}/rules")
    def rules(self, cid: str) -> Call:
        """The decision rules with where each stands (``firing``, ``streak``)."""
        return Call()

    @endpoint("DELETE", "/v1/comparisons/{cid}/rules/{name}")
    def remove_rule(self, cid: str, name: str) -> Call:
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/events")
    def events(self, cid: str, after: int = 0, limit: int | None = None) -> Call:
        """Events of the decision rules after chunk ``after``, oldest first:
        ``{"events", "next_after"}``; pass ``next_after`` as ``after`` for the next page."""
        params = {"after": after, **({} if limit is None else {"limit": limit})}
        return Call(params=params)

    @endpoint("GET", "/v1/comparisons/{cid}/webhook-secret")
    def webhook_secret(self, cid: str) -> Call:
        """``{"secret"}``: what signs the comparison's webhook deliveries (check them with
        ``modelcompare.service.webhooks.signing.verify``)."""
        return Call()

    @endpoint("POST", "/v1/comparisons/{cid}/webhook-secret")
    def rotate_webhook_secret(self, cid: str) -> Call:
        """A new secret; deliveries from now on are signed with it."""
        return Call()

    @endpoint("GET", "/v1/comparisons/{cid}/deliveries")
    def deliveries(self, cid: str, state: str = "pending", limit: int = 100) -> Call:
        """Webhook deliveries ``"pending"`` (waiting for a try) or ``"dead"`` (given up on)."""
        return Call(params={"state": state, "limit": limit})

    @endpoint("POST", "/v1/comparisons/{cid}/deliveries/{delivery}/replay")
    def replay_delivery(self, cid: str, delivery: str) -> Call:
        """A dead delivery waits again, due now."""
        return Call()

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
