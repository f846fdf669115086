"""A chunk whose update failed: retried, then the models at fault failed, or it is poison.

Each failed attempt is counted in Redis (across workers). Once ``poison_max_attempts`` are
spent: with ``poison_scope="model"`` a failure that lies in some models' own updates (they
raised or lost finiteness) fails those models, which leave the comparison (``failed`` in the
evidence, out of the probabilities), and the chunk is applied to the others. Otherwise, or when
no model would be left, the chunk is dead-lettered: ``poison_policy="halt"`` keeps the last good
state and stops on it until an operator resumes; ``"skip"`` commits it as an empty block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from modelcompare.service.core.config import Settings
from modelcompare.service.evidence import evidence_body
from modelcompare.service.reducers import halted, next_version
from modelcompare.service.store.queue import Queue
from modelcompare.service.store.tasks import Staged
from modelcompare.service.store.work_records import Commit, DeadLetter, Entry, Snapshot

log = logging.getLogger("modelcompare.worker")

# Worker._compute_counted: (comparison, snapshot, entry, dead letter, models to fail) -> the
# commit; any failure (but Redis's) raised as ChunkFailed
Compute = Callable[[str, Snapshot, Entry, DeadLetter | None, dict[str, str] | None], Commit]


class ChunkFailed(Exception):
    """An estimator could not absorb a chunk (raised, or its log evidence became non-finite).

    ``models``: the models whose own updates failed, with why; empty when the failure is not
    one model's (outside the estimator, or the chunk's compute budget, which the models one
    worker computes share, so the model it ran out in need not be the slow one).
    """

    def __init__(self, message: str, models: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.models = models or {}

    @classmethod
    def of(cls, results: dict[str, Staged]) -> ChunkFailed:
        errors = {name: r.error for name, r in results.items() if r.error}
        attributed = not any(r.over_budget for r in results.values())
        return cls(next(iter(errors.values())), errors if attributed else None)


class Poison:
    def __init__(self, queue: Queue, settings: Settings, compute: Compute) -> None:
        self.queue = queue
        self.settings = settings
        self.compute = compute

    def give_up(self, cid: str, snap: Snapshot, entry: Entry,
                failure: ChunkFailed) -> Commit | None:
        """None while the chunk has attempts left, or when the comparison is gone (deleted
        while its chunk was computed: nothing is left to commit to); else the commit that fails
        the models at fault or dead-letters the chunk."""
        attempts = self.queue.record_failure(cid, entry.sequence)
        if attempts is None:
            log.info("comparison %s: gone while chunk %d was computed", cid, entry.sequence)
            return None
        limit = self.settings.poison_max_attempts
        if attempts < limit:
            # INFO: a retry may well succeed (a budget overrun on a busy machine); if none does,
            # the outcome is logged at ERROR below (the worker logs the failed models).
            log.info("comparison %s: chunk %d failed (attempt %d of %d): %s", cid,
                     entry.sequence, attempts, limit, failure.message)
            return None
        if self.settings.poison_scope == "model" and failure.models:
            isolated = self._isolate(cid, snap, entry, failure.models)
            if isolated is not None:
                return isolated
        halt = self.settings.poison_policy == "halt"
        log.error("comparison %s: chunk %d dead-lettered after %d attempts (%s): %s", cid,
                  entry.sequence, attempts, "halting" if halt else "skipping it",
                  failure.message)
        letter = DeadLetter(failure.message, attempts, "halted" if halt else "skipped",
                            entry.block)
        if not halt:
            try:
                return self.compute(cid, snap, entry, letter, None)
            except ChunkFailed:  # it cannot even be skipped (the failure is not the chunk's)
                log.error("comparison %s: chunk %d cannot be skipped", cid, entry.sequence)
                letter = DeadLetter(failure.message, attempts, "halted", entry.block)
        return halt_commit(cid, snap, entry, failure.message, letter)

    def _isolate(self, cid: str, snap: Snapshot, entry: Entry,
                 models: dict[str, str]) -> Commit | None:
        """The commit that fails ``models`` and applies the chunk to the others; a model that
        fails on it once they are left out fails too (its update is a function of its state and
        the chunk: a retry would fail alike). None when no model would be left or a failure is
        not one model's: the chunk is then poison."""
        live = set(snap.progress.joined)
        failing: dict[str, str] = {}
        while models:
            for name, why in models.items():
                failing[name] = f"chunk {entry.sequence}: {why.removeprefix(f'model {name!r}: ')}"
            if live <= failing.keys():
                return None
            try:
                return self.compute(cid, snap, entry, None, failing)
            except ChunkFailed as further:  # naming no model when it is not one model's
                models = further.models
        return None


def halt_commit(cid: str, snap: Snapshot, entry: Entry, message: str,
                letter: DeadLetter) -> Commit:
    """Record the dead letter and stop on ``entry``: the last good state is kept and served,
    the comparison reports itself degraded with the reason, until an operator resumes it."""
    reason = (f"halted at chunk {entry.sequence}: it failed {letter.attempts} attempt(s), last "
              f"{message}; later chunks wait for POST /v1/comparisons/{cid}/resume")
    progress = next_version(halted(snap.progress, entry.sequence, message, reason))
    return Commit(version=snap.version, sequence=entry.sequence, entry_id=entry.id,
                  block=b"", progress=progress, evidence=evidence_body(snap.spec, progress),
                  trace=None, states={}, halt=True, dead_letter=letter)
