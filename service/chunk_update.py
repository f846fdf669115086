"""A chunk applied to the models that take it: their updates, computed here or by helpers
(service/parallel.py), and what each model reads after its own."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from modelcompare.service.engine import Runner
from modelcompare.service.parallel import ModelTasks
from modelcompare.service.poison import ChunkFailed
from modelcompare.service.progress import ComparisonProgress, Reading
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.work_records import Entry, Snapshot


class Updated(NamedTuple):
    """Every joined model's reading and new state after the chunk, the chunk's rows, and the
    seconds the updates took."""

    readings: dict[str, Reading]
    states: dict[str, bytes]
    rows: int
    seconds: float


def update_models(tasks: ModelTasks, cid: str, snap: Snapshot, entry: Entry,
                  runners: dict[str, Runner], progress: ComparisonProgress,
                  states: dict[str, bytes], history: Any, cutoff: float) -> Updated:
    """The updates of ``progress.joined`` by ``entry`` from their committed states, or from
    ``states`` where this step moved them (a model that caught up: no helper can read that
    state, so this worker computes every model alone). Raises ``ChunkFailed`` when an update
    failed, ``CutOff`` past ``cutoff`` CPU seconds."""
    rows = decode_block(entry.block)
    started = time.perf_counter()
    before = {name: states.get(name, snap.states[name]) for name in progress.joined}
    updated = tasks.update_all(cid, runners, before, rows, entry.block,
                               history.prefix(snap.sequence), entry.sequence, cutoff,
                               alone=bool(states))
    seconds = time.perf_counter() - started
    if any(r.error for r in updated.values()):
        raise ChunkFailed.of(updated)
    return Updated({name: r.reading for name, r in updated.items() if r.reading is not None},
                   {name: r.state for name, r in updated.items()}, rows.count, seconds)
