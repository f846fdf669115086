"""Re-estimates: log Z estimated again from the prior over every row seen, in a random order,
once the particles have gone astray (docs/design/re-estimates.md).

An online particle method carries one particle system along the stream. Where the rows arrive out
of exchangeable order (sorted by a covariate, drifting), a piece can need a posterior far from the
last one, and its annealing leaves a finite-M bias that no error bar shows: sorted mixture streams
end thousands of nats low. The log evidence of the rows seen does not depend on their order
(every model's rows are independent given θ), so the same kernel, run from the prior over a
random permutation of them, estimates it again from what is an i.i.d. stream: the case whose
error bars are calibrated. That pass costs what the rows seen cost; made only once n has grown
by ``growth`` since the last one, all passes together cost at most growth / (growth − 1) times
the rows of the last: amortised O(1) per row, as re-anchoring. A wrapper of the chunk update;
its state is the ``reestimate`` slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
from modelcompare.estimators.online.extension_settings import ReestimateSettings
from modelcompare.estimators.online.kernel import (
    ChunkUpdate,
    PieceKernel,
    absorb_pieces,
    spread_after,
)
from modelcompare.estimators.online.reports import ChunkReport, astray, exact_phase_steps
from modelcompare.estimators.online.state import ParticleState


def can_come(settings: ReestimateSettings, rows_seen: int) -> bool:
    """Whether a re-estimate can still be made at ``rows_seen`` rows or later."""
    return rows_seen <= settings.reestimate_max_rows


def due(settings: ReestimateSettings, rows_seen: int, last_rows: int, astray: bool) -> bool:
    """Whether to re-estimate over ``rows_seen`` rows, given whether a chunk has left the
    particles astray since the last re-estimate (at ``last_rows``). Astray is remembered: a
    cloud that collapsed onto one point gives no later sign, its moves no longer move it."""
    return (
        astray
        and settings.reestimate_min_rows <= rows_seen
        and can_come(settings, rows_seen)
        and rows_seen >= settings.reestimate_growth * last_rows
    )


def shuffled(history: History, chunk: Rows, generator: torch.Generator) -> Rows:
    """Every row of ``history`` and ``chunk`` in a uniformly random order."""
    seen = ExtendedHistory(history, chunk)
    rows = cat_rows(list(seen.blocks(len(seen))))
    order = torch.randperm(len(seen), generator=generator, device=generator.device)
    return rows.take(order)


def reestimating(
    kernel: PieceKernel,
    settings: ReestimateSettings,
    fresh: Callable[[torch.Generator], ParticleState],
    inner: ChunkUpdate,
) -> ChunkUpdate:
    """``inner``, followed past the exact phase by a re-estimate from ``fresh`` prior draws
    when one is due; the cloud's spread is measured on every such chunk (the trigger reads it)
    while a re-estimate can still come. ``inner`` itself when ``reestimate_growth`` is 0."""
    if settings.reestimate_growth == 0.0:
        return inner

    def update(
        state: ParticleState,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[ParticleState, ChunkReport]:
        n = int(state.n_observations)
        state, report = inner(state, chunk, history, generator, deadline)
        after = int(state.n_observations)
        if n <= kernel.full_batch_rows:
            exact = exact_phase_steps(report.pieces, kernel.full_batch_rows)
            slot = state.reestimate
            return state._replace(reestimate=slot._replace(
                exact_steps=slot.exact_steps + exact)), report
        if not can_come(settings, after):
            return state, report
        if math.isnan(report.spread):
            spread = spread_after(kernel, state, history, chunk, generator)
            report = report._replace(spread=spread)
        slot = state.reestimate
        if not int(slot.astray_rows) and astray(report.pieces, report.spread,
                                                 int(slot.exact_steps)):
            slot = slot._replace(astray_rows=state.n_observations.clone())
            state = state._replace(reestimate=slot)
        if not due(settings, after, int(slot.last_rows), int(slot.astray_rows) > 0):
            return state, report
        return reestimated(kernel, fresh, state, history, chunk, generator, deadline, report)

    return update


def reestimated(
    kernel: PieceKernel,
    fresh: Callable[[torch.Generator], ParticleState],
    state: ParticleState,
    history: History,
    chunk: Rows,
    generator: torch.Generator,
    deadline: Deadline | None,
    report: ChunkReport,
) -> tuple[ParticleState, ChunkReport]:
    """The kernel's pieces from ``fresh`` prior draws over every row of ``history`` and
    ``chunk``, shuffled, marked as a re-estimate at their count. When the pass runs past half of
    what is left of ``deadline`` (the other half is the other models' of the update) it is
    abandoned: the attempt is marked, the particles stay astray."""
    rows = shuffled(history, chunk, generator)
    half = None if deadline is None else deadline.share(0.5)
    try:
        new, pieces = absorb_pieces(kernel, fresh(generator), rows, RowsHistory(rows.slice(0, 0)),
                                    generator, half)
    except BudgetExceeded:
        slot = state.reestimate._replace(last_rows=state.n_observations.clone())
        return state._replace(reestimate=slot), report
    # the stream's own exact phase stays the measure of its later pieces' ladders
    slot = new.reestimate._replace(last_rows=state.n_observations.clone(),
                                   exact_steps=state.reestimate.exact_steps)
    spread = spread_after(kernel, new, history, chunk, generator)
    # a pass can go astray too (calibration data set 22 froze in one): the next one waits
    # until n has grown by ``growth`` again. Its pieces' ladders are measured against its own
    # exact phase (a piece of that phase is part of it, so never longer)
    exact = exact_phase_steps(pieces, kernel.full_batch_rows)
    if astray(pieces, spread, exact):
        slot = slot._replace(astray_rows=new.n_observations.clone())
    return new._replace(reestimate=slot), ChunkReport(report.pieces, True, spread)
