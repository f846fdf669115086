"""The errors the clients raise."""

from __future__ import annotations

import json
from typing import Any


class ModelCompareError(Exception):
    """An error reply of the API, with its ``{"error": {"code", "message", "details"}}``;
    ``status`` None when there was no reply, or the client refused to send (e.g. NaN in x).
    ``idempotency_key``: the key a failed chunk was sent with; send it again with that key.
    ``outcome_unknown``: the chunk may or may not have been accepted (its reply was lost)."""

    def __init__(self, status: int | None, code: str, message: str, details: Any = None,
                 idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.idempotency_key = idempotency_key
        self.outcome_unknown = False

    def __str__(self) -> str:
        where = "" if self.status is None else f" (HTTP {self.status})"
        return f"{self.code}: {self.message}{where}"


class ServerUnreachable(ModelCompareError):
    """No reply at all: the server is down, the URL is wrong, or the connection broke."""

    def __init__(self, url: str, reason: str, idempotency_key: str | None = None) -> None:
        super().__init__(None, "unreachable", f"cannot reach {url}: {reason}", {"url": url},
                         idempotency_key)


def reply_error(status: int, body: bytes) -> ModelCompareError:
    """The API's ``{"error": {...}}``, or the body as the message when it is something else."""
    try:
        error = json.loads(body)["error"]
        return ModelCompareError(status, error["code"], error["message"], error.get("details"))
    except (ValueError, KeyError, TypeError):
        return ModelCompareError(status, "http_error", body.decode(errors="replace").strip()
                                 or f"HTTP {status}")
