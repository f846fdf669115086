"""The commit of one worker step: the progress record it reached, projected to the public body,
with the chunk's trace point, the events of its decision rules with their webhook deliveries,
and what the logs and metrics report (models newly marked unreliable or failed)."""

from __future__ import annotations

import time
from typing import Any

from modelcompare.service.events import EventRecord
from modelcompare.service.evidence import evidence_body, trace_point
from modelcompare.service.progress import ComparisonProgress
from modelcompare.service.reducers import after_skip, next_version
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.codec import empty_block
from modelcompare.service.store.work_records import Commit, DeadLetter, Entry, Snapshot
from modelcompare.service.webhooks.deliveries import DeliveryRecord, delivery_of


def commit_of(snap: Snapshot, progress: ComparisonProgress, states: dict[str, bytes],
              entry: Entry | None = None, block: bytes = b"",
              dead_letter: DeadLetter | None = None,
              events: tuple[EventRecord, ...] = ()) -> Commit:
    """The commit from ``snap`` to ``progress`` (one version on), with the models' new
    ``states``; with ``entry``, the chunk it applies as ``block`` and its trace point, and the
    ``events`` of the decision rules evaluated on it."""
    after = next_version(progress)
    before = snap.progress.models
    return Commit(
        version=snap.version,
        sequence=after.sequence,
        entry_id="" if entry is None else entry.id,
        block=block,
        progress=after,
        evidence=evidence_body(snap.spec, after),
        trace=None if entry is None else trace_of(after),
        states=states,
        dead_letter=dead_letter,
        marked_unreliable={name: m.reliability.reason or "" for name, m in after.models.items()
                           if not m.reliability.reliable and before[name].reliability.reliable},
        failed_models={name: m.failed for name, m in after.models.items()
                       if m.failed and not before[name].failed},
        events=events,
        deliveries=deliveries_of(snap.spec, events),
    )


def deliveries_of(spec: ComparisonSpec, events: tuple[EventRecord, ...]
                  ) -> tuple[DeliveryRecord, ...]:
    """A webhook delivery for each event whose rule names a webhook."""
    webhooks = {rule.name: rule.webhook for rule in spec.rules if rule.webhook}
    now = time.time()
    return tuple(delivery_of(event, webhooks[event.rule], now) for event in events
                 if event.rule in webhooks)


def skip_commit(snap: Snapshot, progress: ComparisonProgress, states: dict[str, bytes],
                entry: Entry, dead_letter: DeadLetter | None) -> Commit:
    """The commit that gives ``entry`` up as an empty block (``dead_letter``: why; None when
    the operator chose to skip it)."""
    message = "skipped by the operator" if dead_letter is None else dead_letter.error
    return commit_of(snap, after_skip(progress, entry.sequence, message), states, entry,
                     empty_block(snap.spec.x_dim, snap.spec.has_y), dead_letter)


def trace_of(progress: ComparisonProgress) -> dict[str, Any]:
    """The trace point (GET /history) of the chunk ``progress`` has just applied: the models
    that took it."""
    return {"sequence": progress.sequence, "version": progress.version,
            "n_observations": progress.n_observations,
            "compute_seconds": None if progress.compute_seconds is None
            else round(progress.compute_seconds, 4),
            "models": {name: trace_point(progress.models[name]) for name in progress.joined}}
