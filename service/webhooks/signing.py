"""How a delivery is signed, and how a receiver checks it.

Each comparison has its secret (``whsec_`` and 64 hex digits; GET/POST
/v1/comparisons/{id}/webhook-secret). A delivery carries the header
``Modelcompare-Signature: t=<unix seconds>,v1=<hex>`` where the hex digest is
HMAC-SHA256(secret, "<t>." + body): the timestamp is signed with the body, so a receiver that
refuses old timestamps refuses a captured delivery sent again later. ``verify`` is what a
receiver in Python calls (docs/guide/decisions.md shows it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

SIGNATURE_HEADER = "Modelcompare-Signature"
EVENT_ID_HEADER = "Modelcompare-Event-Id"
ATTEMPT_HEADER = "Modelcompare-Delivery-Attempt"
SECRET_PREFIX = "whsec_"
TOLERANCE_SECONDS = 300.0  # how old a delivery ``verify`` accepts by default


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_hex(32)


def digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The signature header's value for ``body`` sent at ``timestamp`` (now by default)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={digest(secret, t, body)}"


def verify(secret: str, header: str, body: bytes, tolerance: float = TOLERANCE_SECONDS,
           now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` at a time at most ``tolerance``
    seconds from ``now``. ``body`` is the raw request body, as received."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = digest(secret, timestamp, body)
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))
