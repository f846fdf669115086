"""Models added mid-stream: replay of the stored history, a batch of blocks per step."""

from __future__ import annotations

import logging
from typing import Any

from modelcompare.estimators import Deadline, state_to_bytes
from modelcompare.service.core.config import Settings
from modelcompare.service.engine import Runner
from modelcompare.service.progress import ComparisonProgress, ModelProgress
from modelcompare.service.reducers import after_reading
from modelcompare.service.store.work_records import Snapshot

log = logging.getLogger("modelcompare.worker")


def catch_up_all(runners: dict[str, Runner], snap: Snapshot, progress: ComparisonProgress,
                 history: Any, settings: Settings) -> tuple[ComparisonProgress, dict[str, bytes]]:
    """``progress`` with a replay step of every model catching up (``catch_up``), and the
    states they reached."""
    models, states = {}, {}
    for name, model in progress.models.items():
        if model.catching_up:
            state, models[name] = catch_up(runners[name], snap, model, history, settings)
            states[name] = state_to_bytes(state)
    return progress.model_copy(update={"models": {**progress.models, **models}}), states


def catch_up(runner: Runner, snap: Snapshot, model: ModelProgress, history: Any,
             settings: Settings) -> tuple[Any, ModelProgress]:
    """Replay stored blocks (each with its own sequence) for a model added mid-stream, at most
    ``settings.batch_chunks`` of them and no more once ``settings.update_budget`` CPU seconds of
    this thread have passed, so that a long replay holds the worker no longer than one live
    update may (the clock the live budget counts, which a busy host does not use up); a block
    whose own update takes longer than the budget fails the model (``BudgetExceeded``), like a
    live chunk that does. Each replayed block advances the model's windowed evidence and
    reliability record as a live update does. Returns the state reached and the model; a model
    that failed keeps its stored state (and the record of the blocks it replayed)."""
    state = runner.load(snap.states[runner.name])
    first = model.sequence + 1
    target = min(snap.sequence, first + settings.batch_chunks - 1)
    budget = settings.update_budget
    step = Deadline.cpu_after(budget)
    try:
        for sequence in range(first, target + 1):
            if sequence > first and step.passed():
                break
            rows = history.block(sequence - 1)
            if rows.count:
                state, info = runner.update(state, rows, history.prefix(sequence - 1),
                                            sequence, Deadline.cpu_after(budget))
                model = after_reading(model, runner.reading(state, info), sequence, settings)
            else:
                model = model.model_copy(update={"sequence": sequence})
    except Exception as exc:
        log.exception("model %s failed while catching up", runner.name)
        failed = model.model_copy(update={"failed": f"{type(exc).__name__}: {exc}",
                                          "catching_up": False})
        return runner.load(snap.states[runner.name]), failed
    return state, model.model_copy(update={"catching_up": model.sequence < snap.sequence})
