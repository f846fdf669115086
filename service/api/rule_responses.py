"""Response bodies of decision rules and their events (docs/guide/decisions.md): the public
views of the stored ``RuleSpec`` with its ``RuleState``, and of ``EventRecord``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from modelcompare.service.api.body import Body
from modelcompare.service.rules import When

Figure = float | int | str | None


class RuleOut(Body):
    name: str
    when: When = Field(description="the condition: exactly one of its keys")
    for_chunks: int = Field(description="consecutive chunks the condition must hold to fire")
    stderrs: float = Field(description="k: the value is tested k standard errors on the "
                           "cautious side of the threshold")
    created_at: float = Field(description="Unix time")
    webhook: str | None = Field(description="where the rule's events are POSTed; null for none")


class RuleStatus(RuleOut):
    firing: bool = Field(description="fired and not cleared since")
    streak: int = Field(description="consecutive chunks the condition has held (best_changed: "
                        "another model has led by the margin)")
    best: str | None = Field(description="best_changed only: the best model it last saw")


class RuleList(Body):
    rules: list[RuleStatus] = Field(description="in the order they were added")
    version: int = Field(description="the comparison's version the states are of")


class EventOut(Body):
    id: str = Field(description="<comparison>:<sequence>:<rule>: names this event for good (an "
                    "idempotency key for whatever it triggers)")
    comparison: str
    rule: str
    kind: Literal["fired", "cleared"]
    sequence: int = Field(description="the chunk after which the rule fired or cleared")
    n_observations: int = Field(description="rows applied then")
    time: float = Field(description="Unix time of the worker's decision")
    when: When
    for_chunks: int
    stderrs: float
    figures: dict[str, Figure] = Field(
        description="what it was decided on: value, stderr, bound (the value moved k stderr "
        "towards the threshold), threshold; rows (window); from and to (best_changed); reason "
        "(unreliable)")


class EventPage(Body):
    events: list[EventOut] = Field(description="oldest first")
    next_after: int | None = Field(description="pass as ?after= for the next page; null on the "
                                   "last one")


class DeliveryOut(Body):
    id: str = Field(description="the event's id: a receiver's idempotency key")
    comparison: str
    rule: str
    url: str
    created: float = Field(description="Unix time the event's commit made the delivery")
    attempts: int = Field(description="tries made (since the last replay)")
    next_attempt: float | None = Field(description="Unix time of the next try; null once dead")
    last_status: int | None = Field(description="HTTP status of the last try; null when none "
                                    "came (refused, timed out, no connection)")
    last_error: str | None = Field(description="what went wrong at the last try")
    dead_at: float | None = Field(description="Unix time it was given up on; null while it waits")


class DeliveryList(Body):
    state: Literal["pending", "dead"]
    deliveries: list[DeliveryOut] = Field(description="pending: the soonest due first; dead: the "
                                          "newest first")


class WebhookSecret(Body):
    secret: str = Field(description="HMAC-SHA256 key of the Modelcompare-Signature header")
