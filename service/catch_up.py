"""Models added mid-stream: replay of the stored history, a batch of blocks per step."""

from __future__ import annotations

import logging
from typing import Any

from service.engine import Runner
from service.store.queue import Snapshot
from service.window import advance

log = logging.getLogger("modelcompare.worker")


def catch_up(runner: Runner, snap: Snapshot, summary: dict[str, Any], history: Any,
             batch_chunks: int, window_rows: int) -> Any:
    """Replay stored blocks (each with its own sequence) for a model added mid-stream;
    ``window_rows``: the rows W of its windowed evidence (service/window.py)."""
    state = runner.load(snap.states[runner.name])
    target = min(snap.sequence, summary["sequence"] + batch_chunks)
    try:
        for sequence in range(summary["sequence"] + 1, target + 1):
            rows = history.block(sequence - 1)
            if rows.count:
                state, info = runner.update(state, rows, history.prefix(sequence - 1),
                                            sequence)
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
