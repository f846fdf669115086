"""Re-estimating log Z from the prior over every row seen, in a random order, once the particles
have gone astray.

An online particle method carries one particle system along the stream. Where the rows arrive out
of exchangeable order (sorted by a covariate, drifting), a piece can need a posterior far from the
last one, and its annealing leaves a finite-M bias that no error bar shows: sorted mixture streams
end thousands of nats low (see docs/design/drift.md). The log evidence of the rows seen does
not depend on their order (every model's rows are independent given θ), so the same loop, run from
the prior over a random permutation of them, estimates it again from what is an i.i.d. stream: the
case whose error bars are calibrated. That pass costs what the rows seen cost; made only once n has
grown by ``growth`` since the last one, all passes together cost at most growth / (growth − 1)
times the rows of the last: amortised O(1) per row, as re-anchoring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch

from modelcompare.estimators.data.history import (
    ExtendedHistory,
    History,
    Rows,
    RowsHistory,
    cat_rows,
)
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.errors import BudgetExceeded

StateT = TypeVar("StateT", bound=NamedTuple)  # the loop's state: ``records.ParticleState``
# (state, rows, history, generator, deadline) -> (state after the rows, their reports)
Absorb = Callable[[StateT, Rows, History, torch.Generator, Deadline | None], tuple[StateT, Any]]


class Restart(NamedTuple):
    growth: float  # a re-estimate once n ≥ growth × the rows of the last one
    min_rows: int  # none before n reaches this
    max_rows: int  # nor after: the pass runs inside one update


def can_come(restart: Restart, rows_seen: int) -> bool:
    """Whether a re-estimate can still be made at ``rows_seen`` rows or later (none past
    ``max_rows``)."""
    return rows_seen <= restart.max_rows


def restart_due(restart: Restart, rows_seen: int, last_restart_rows: int, astray: bool) -> bool:
    """Whether to re-estimate over ``rows_seen`` rows, given whether a chunk has left the
    particles astray (``particles.astray``) since the last re-estimate. Astray is remembered:
    a cloud that collapsed onto one point gives no later sign, its moves no longer move it."""
    return (
        astray
        and restart.min_rows <= rows_seen
        and can_come(restart, rows_seen)
        and rows_seen >= restart.growth * last_restart_rows
    )


def shuffled(history: History, chunk: Rows, generator: torch.Generator) -> Rows:
    """Every row of ``history`` and ``chunk`` in a uniformly random order."""
    seen = ExtendedHistory(history, chunk)
    rows = cat_rows(list(seen.blocks(len(seen))))
    order = torch.randperm(len(seen), generator=generator, device=generator.device)
    return rows.take(order)


def reestimated(
    absorb: Absorb[StateT],
    fresh: Callable[[torch.Generator], StateT],
    state: StateT,
    history: History,
    chunk: Rows,
    generator: torch.Generator,
    deadline: Deadline | None,
) -> tuple[StateT, Any] | None:
    """``absorb`` (the loop's pieces, in order) from ``fresh`` prior draws over every row of
    ``history`` and ``chunk``, shuffled: the state it ends in, marked as a re-estimate at their
    count, and its reports. None when the pass runs past half of what is left of ``deadline``
    (the other half is the other models' of the update)."""
    rows = shuffled(history, chunk, generator)
    half = None if deadline is None else deadline.share(0.5)
    try:
        new_state, reports = absorb(fresh(generator), rows, RowsHistory(rows.slice(0, 0)),
                                    generator, half)
    except BudgetExceeded:
        return None
    return new_state._replace(restart_rows=state.n_observations.clone()), reports
