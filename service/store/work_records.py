"""The records a worker reads and commits through the queue (``queue.Queue``): a queued chunk,
a comparison as read, a commit and what it keeps, a dead letter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from modelcompare.service.core.config import (
    DEAD_DELIVERIES_KEPT,
    EVENTS_KEPT,
    WEBHOOK_OUTBOX_MAX,
    Settings,
)
from modelcompare.service.events import EventRecord
from modelcompare.service.progress import ComparisonProgress
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.webhooks.deliveries import DeliveryRecord


@dataclass(frozen=True)
class Entry:
    """One queued chunk: its stream id, sequence and binary block."""

    id: str
    sequence: int
    block: bytes


@dataclass
class Snapshot:
    """A comparison as a worker sees it at one version."""

    spec: ComparisonSpec
    version: int
    sequence: int
    progress: ComparisonProgress
    states: dict[str, bytes] = field(default_factory=dict)
    halted: int = 0  # sequence of the dead-lettered chunk processing is halted on (0: none)
    skip: int = 0  # sequence of a halted chunk the operator chose to skip (0: none)


class Stored(NamedTuple):
    """What one read of a comparison found: its meta, one record key (raw) and the states."""

    spec: ComparisonSpec
    version: int
    sequence: int
    halted: int
    skip: int
    record: bytes | None
    states: dict[str, bytes]


@dataclass(frozen=True)
class DeadLetter:
    """Why a chunk was given up on: the last error, after how many failed attempts."""

    error: str
    attempts: int
    action: str  # "halted" | "skipped"
    block: bytes  # the chunk as ingested


@dataclass(frozen=True)
class Commit:
    version: int  # the version the new states were computed from (compare-and-set)
    sequence: int
    entry_id: str  # '' for a catch-up step that applies no new chunk
    block: bytes
    progress: ComparisonProgress  # at version + 1
    evidence: dict[str, Any]  # its public view (service/evidence.py), for readers only
    trace: dict[str, Any] | None
    states: dict[str, bytes]
    halt: bool = False  # record the dead letter and stop on the entry instead of applying it
    dead_letter: DeadLetter | None = None
    # models this step marked unreliable (service/reliability.py), with the reason
    marked_unreliable: dict[str, str] = field(default_factory=dict)
    # models this step failed (they left the comparison: ``failed`` in the evidence), with why
    failed_models: dict[str, str] = field(default_factory=dict)
    # the decision rules that fired or cleared on this step's chunk (service/decisions.py)
    events: tuple[EventRecord, ...] = ()
    # the webhook deliveries of those events whose rule names a webhook (same ids)
    deliveries: tuple[DeliveryRecord, ...] = ()


@dataclass(frozen=True)
class Retention:
    """What a commit keeps per comparison: events, deliveries waiting, dead deliveries."""

    events: int = EVENTS_KEPT
    outbox: int = WEBHOOK_OUTBOX_MAX
    dead_deliveries: int = DEAD_DELIVERIES_KEPT

    @classmethod
    def of(cls, settings: Settings) -> Retention:
        return cls(settings.events_kept, settings.webhook_outbox_max,
                   settings.dead_deliveries_kept)
