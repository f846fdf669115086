"""A decision rule's event as stored: a rule fired or cleared after a chunk (service/decisions.py).

The id is made from the comparison, the chunk's sequence and the rule: a rule changes state at
most once per chunk and a chunk is committed once, so the id names one event for good: the
commit script stores an id only once (service/store/scripts.py ``COMMIT``), and a consumer
(a webhook receiver, a script) may use it as an idempotency key. ``encode`` and ``decode`` are
its only codec; the public view is service/api/responses.py ``EventOut``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from modelcompare.service.rules import When

Figure = float | int | str | None


class EventRecord(BaseModel):
    """``rule`` ``kind`` after chunk ``sequence`` (``n_observations`` rows in all), at ``time``
    (Unix s), with the condition as it stood and the figures it was decided on."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    comparison: str
    rule: str
    kind: Literal["fired", "cleared"]
    sequence: int
    n_observations: int
    time: float
    when: When
    for_chunks: int
    stderrs: float
    figures: dict[str, Figure]

    def public(self) -> dict[str, Any]:
        """The public view's fields (service/api/rule_responses.py ``EventOut``)."""
        return {**self.model_dump(mode="json"), "when": self.when.public()}


def event_id(comparison: str, sequence: int, rule: str) -> str:
    """``<comparison>:<sequence>:<rule>`` (rule names have no ':')."""
    return f"{comparison}:{sequence}:{rule}"


def encode(event: EventRecord) -> str:
    return event.model_dump_json()


def decode(raw: bytes | str) -> EventRecord:
    return EventRecord.model_validate_json(raw)
