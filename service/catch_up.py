"""Models added mid-stream: replay of the stored history, a batch of blocks per step."""

from __future__ import annotations

import logging
from typing import Any

from estimators import Deadline
from service.engine import Runner
from service.store.queue import Snapshot
from service.window import advance

log = logging.getLogger("modelcompare.worker")


def catch_up(runner: Runner, snap: Snapshot, summary: dict[str, Any], history: Any,
             batch_chunks: int, window_rows: int, budget: float) -> Any:
    """Replay stored blocks (each with its own sequence) for a model added mid-stream, at most
    ``batch_chunks`` of them and no more once ``budget`` seconds have passed, so that a long
    replay holds the worker no longer than one live update may; a block whose own update takes
    longer than ``budget`` fails the model (``BudgetExceeded``), like a live chunk that does.
    ``window_rows``: the rows W of its windowed evidence (service/window.py)."""
    state = runner.load(snap.states[runner.name])
    first = summary["sequence"] + 1
    target = min(snap.sequence, first + batch_chunks - 1)
    step = Deadline.after(budget)
    try:
        for sequence in range(first, target + 1):
            if sequence > first and step.passed():
                break
            rows = history.block(sequence - 1)
            if rows.count:
                state, info = runner.update(state, rows, history.prefix(sequence - 1),
                                            sequence, Deadline.after(budget))
                summary.update(runner.summary(state, info))
                advance(summary, window_rows)
            summary["sequence"] = sequence
    except Exception as exc:
        log.exception("model %s failed while catching up", runner.name)
        summary.update(failed=f"{type(exc).__name__}: {exc}", catching_up=False)
        return runner.load(snap.states[runner.name])
    summary["catching_up"] = summary["sequence"] < snap.sequence
    return state


def catching_up(snap: Snapshot) -> bool:
    return any(m["catching_up"] for m in snap.evidence["models"])
