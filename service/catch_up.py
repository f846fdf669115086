"""Models added mid-stream: replay of the stored history, a batch of blocks per step."""

from __future__ import annotations

import logging
from typing import Any

from modelcompare.estimators import Deadline
from modelcompare.service.core.config import Settings
from modelcompare.service.engine import Runner
from modelcompare.service.reliability import observe
from modelcompare.service.store.queue import Snapshot
from modelcompare.service.window import advance

log = logging.getLogger("modelcompare.worker")


def catch_up(runner: Runner, snap: Snapshot, summary: dict[str, Any], history: Any,
             settings: Settings) -> Any:
    """Replay stored blocks (each with its own sequence) for a model added mid-stream, at most
    ``settings.batch_chunks`` of them and no more once ``settings.update_budget`` seconds have
    passed, so that a long replay holds the worker no longer than one live update may; a block
    whose own update takes longer than the budget fails the model (``BudgetExceeded``), like a
    live chunk that does. Each replayed block advances the summary's windowed evidence and
    reliability record as a live update does."""
    state = runner.load(snap.states[runner.name])
    first = summary["sequence"] + 1
    target = min(snap.sequence, first + settings.batch_chunks - 1)
    budget = settings.update_budget
    step = Deadline.after(budget)
    try:
        for sequence in range(first, target + 1):
            if sequence > first and step.passed():
                break
            rows = history.block(sequence - 1)
            if rows.count:
                state, info = runner.update(state, rows, history.prefix(sequence - 1),
                                            sequence, Deadline.cpu_after(budget))
                summary.update(runner.summary(state, info))
                advance(summary, settings.evidence_window_rows)
                observe(summary, settings.diverged_warning_fraction)
            summary["sequence"] = sequence
    except Exception as exc:
        log.exception("model %s failed while catching up", runner.name)
        summary.update(failed=f"{type(exc).__name__}: {exc}", catching_up=False)
        return runner.load(snap.states[runner.name])
    summary["catching_up"] = summary["sequence"] < snap.sequence
    return state


def catching_up(snap: Snapshot) -> bool:
    return any(m["catching_up"] for m in snap.evidence["models"])
