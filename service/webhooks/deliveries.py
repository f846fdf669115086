"""A webhook delivery as stored: the event's body to send to the rule's URL, and how its tries
went. One delivery per event (its id is the event's id: service/events.py), written by the same
commit script that stores the event, so that a worker that dies before or after the commit
neither loses nor doubles it. ``encode`` and ``decode`` are its only codec; the public view is
service/api/rule_responses.py ``DeliveryOut``."""

from __future__ import annotations

import json
import random
from typing import Any

from pydantic import BaseModel, ConfigDict

from modelcompare.service.events import EventRecord


class DeliveryRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    comparison: str
    rule: str
    url: str
    body: str  # the request body, as signed
    created: float  # Unix s
    attempts: int = 0
    next_attempt: float | None = None  # Unix s; None once dead
    last_status: int | None = None
    last_error: str | None = None
    dead_at: float | None = None

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"body"})

    def failed(self, now: float, status: int | None, error: str, retry_in: float | None
               ) -> DeliveryRecord:
        """After one more failed try: due again in ``retry_in`` s, or dead (None)."""
        return self.model_copy(update={
            "attempts": self.attempts + 1, "last_status": status, "last_error": error[:500],
            "next_attempt": None if retry_in is None else now + retry_in,
            "dead_at": now if retry_in is None else None})

    def replayed(self, now: float) -> DeliveryRecord:
        return self.model_copy(update={"attempts": 0, "next_attempt": now, "dead_at": None})


def delivery_of(event: EventRecord, url: str, now: float) -> DeliveryRecord:
    """The delivery of ``event`` to ``url``: the websocket's event frame as the body."""
    body = json.dumps({"type": "event", "event": event.public()}, allow_nan=False,
                      separators=(",", ":"))
    return DeliveryRecord(id=event.id, comparison=event.comparison, rule=event.rule, url=url,
                          body=body, created=now, next_attempt=now)


def outbox_full(record: DeliveryRecord, now: float, outbox_max: int) -> DeliveryRecord:
    """``record`` given up at once, for the commit to store when the comparison already has
    ``outbox_max`` deliveries waiting."""
    return record.failed(now, None, f"not sent: {outbox_max} deliveries of the comparison were "
                         "waiting already (MODELCOMPARE_WEBHOOK_OUTBOX_MAX)", None)


def backoff(attempts: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds before try ``attempts`` + 1: ``base``·2^(attempts−1), at most ``cap``, times a
    uniform draw in [0.5, 1] so that deliveries that failed together do not retry together."""
    return min(cap, base * 2.0 ** (attempts - 1)) * rng.uniform(0.5, 1.0)


def encode(record: DeliveryRecord) -> str:
    return record.model_dump_json()


def decode(raw: bytes | str) -> DeliveryRecord:
    return DeliveryRecord.model_validate_json(raw)
