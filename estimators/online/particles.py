"""The chunk loop shared by the online particle methods (sgais, sequential, minibatch_mh, and
hybrid after its nested phase); its state and parts are ``records``.

A chunk is cut into schedule-sized pieces (``data.schedule``); each piece is annealed in by the
method's tempered-SMC parts (``smc.tempered``) against the past it follows, whose gradient uses a
control-variate anchor re-set at the weighted particle mean whenever n has grown by
``anchor_growth`` (one full pass at one point: the full-data cost stays amortised O(1) per row).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar

import torch

from modelcompare.estimators.data.history import ExtendedHistory, History, Rows
from modelcompare.estimators.data.schedule import split_points
from modelcompare.estimators.deadline import Deadline, check_deadline
from modelcompare.estimators.errors import Progress
from modelcompare.estimators.estimator import (
    Estimator,
    Update,
    lognormal_log_evidence,
    weighted_particles,
)
from modelcompare.estimators.online.piece_parts import PieceParts
from modelcompare.estimators.online.records import ChunkLoop, ParticleState, eve_fields
from modelcompare.estimators.online.reports import ChunkReport, PieceReport, astray
from modelcompare.estimators.online.restart import can_come, reestimated, restart_due
from modelcompare.estimators.online.spread import SPREAD_ROWS, relative_spread
from modelcompare.estimators.online.surprise import drifted, rejuvenate, surprising
from modelcompare.estimators.online.target import Anchor, anchor_at_mean, past_data, with_piece
from modelcompare.estimators.settings import ParticleSettings
from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation, selected
from modelcompare.estimators.smc.tempered import StepInfo, anneal, start
from modelcompare.estimators.smc.weights import ess
from modelcompare.models import Model

InfoT = TypeVar("InfoT")
# (rows of the chunk, the state after it, what it did) -> the method's Info record
Report = Callable[[int, ParticleState, ChunkReport], InfoT]


def chunk_update(loop: ChunkLoop, report: Report[InfoT]) -> Update[ParticleState, InfoT]:
    """``absorb`` with the method's parts, reported as the method's Info record."""

    def update(
        state: ParticleState,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[ParticleState, InfoT]:
        new_state, chunk_report = absorb(loop, state, chunk, history, generator, deadline)
        return new_state, report(chunk.count, new_state, chunk_report)

    return update


def online_estimator(
    method: str, settings: ParticleSettings, loop: ChunkLoop, report: Report[InfoT]
) -> Estimator[ParticleState, InfoT]:
    """The ``Estimator`` of an online particle method: it reports log Ẑ + σ̂²/2
    (``lognormal_log_evidence``)."""
    return weighted_particles(
        method,
        loop.model,
        settings,
        ParticleState,
        settings.particles,
        functools.partial(init, loop.model, settings),
        chunk_update(loop, report),
        log_evidence=lognormal_log_evidence,
    )


def init(model: Model, settings: ParticleSettings, generator: torch.Generator) -> ParticleState:
    """M prior draws with equal weights, log Z = 0, no anchor."""
    m, d, device = settings.particles, model.param_dim, settings.torch_device
    zero = torch.zeros((), dtype=torch.float64, device=device)
    return ParticleState(
        particles=model.sample_prior(m, generator),
        log_weights=torch.full((m,), -math.log(m), dtype=torch.float64, device=device),
        log_evidence=zero,
        log_evidence_variance=zero.clone(),
        n_observations=torch.zeros((), dtype=torch.int64, device=device),
        anchor_point=torch.zeros(d, dtype=torch.float64, device=device),
        anchor_grad=torch.zeros(d, dtype=torch.float64, device=device),
        anchor_rows=torch.zeros((), dtype=torch.int64, device=device),
        restart_rows=torch.zeros((), dtype=torch.int64, device=device),
        astray_rows=torch.zeros((), dtype=torch.int64, device=device),
    )


def absorb(
    loop: ChunkLoop,
    state: ParticleState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None,
) -> tuple[ParticleState, ChunkReport]:
    """``absorb_pieces``, the cloud's spread after them (on every chunk while a re-estimate can
    still come, else on those that cross a multiple of ``SPREAD_ROWS`` rows), then a re-estimate
    over every row seen where ``loop.restart`` makes one due."""
    n = int(state.n_observations)
    state, pieces = absorb_pieces(loop, state, chunk, history, generator, deadline)
    # while the past is used in full, pieces anneal away from the prior: long ladders are
    # expected there, not a sign of trouble; and the moves are exact
    if n <= loop.full_batch_rows:
        return state, ChunkReport(pieces, False, math.nan)
    after = int(state.n_observations)
    # once no re-estimate can come, nothing here reads the spread but the report: then, as
    # without re-estimates, it is measured once in ``SPREAD_ROWS`` rows
    restart = loop.restart
    if restart is not None and not can_come(restart, after):
        restart = None
    if restart is None and n // SPREAD_ROWS == after // SPREAD_ROWS:
        return state, ChunkReport(pieces, False, math.nan)
    seen = ExtendedHistory(history, chunk)
    spread = relative_spread(loop.model, state.particles, state.log_weights, seen, generator)
    if restart is None:
        return state, ChunkReport(pieces, False, spread)
    if not int(state.astray_rows) and astray(pieces, spread):
        state = state._replace(astray_rows=state.n_observations.clone())
    if not restart_due(restart, after, int(state.restart_rows), int(state.astray_rows) > 0):
        return state, ChunkReport(pieces, False, spread)
    assert loop.fresh is not None
    found = reestimated(
        functools.partial(absorb_pieces, loop), loop.fresh, state, history, chunk, generator,
        deadline,
    )
    if found is None:  # abandoned: the attempt is marked, the particles stay astray
        return state._replace(restart_rows=state.n_observations.clone()), ChunkReport(
            pieces, False, spread
        )
    new_state, pass_pieces = found
    spread = relative_spread(loop.model, new_state.particles, new_state.log_weights, seen,
                             generator)
    # a pass can go astray too (calibration data set 22 froze in one): the next one waits
    # until n has grown by ``growth`` again
    if astray(pass_pieces, spread):
        new_state = new_state._replace(astray_rows=new_state.n_observations.clone())
    return new_state, ChunkReport(pieces, True, spread)


def absorb_pieces(
    loop: ChunkLoop,
    state: ParticleState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None,
) -> tuple[ParticleState, tuple[PieceReport, ...]]:
    """Every piece of ``chunk`` in turn; ``history`` holds exactly the rows before it."""
    n = int(state.n_observations)
    if len(history) != n:
        raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
    reports = []
    for begin, end in split_points(n, chunk.count):
        seen = ExtendedHistory(history, chunk.slice(0, begin)) if begin else history
        state, report = absorb_piece(
            loop, state, chunk.slice(begin, end), seen, generator, deadline, begin
        )
        reports.append(report)
    return state, tuple(reports)


def current_anchor(
    loop: ChunkLoop, state: ParticleState, history: History
) -> tuple[Anchor | None, bool]:
    """The control-variate anchor for the next piece, and whether it was just (re)set."""
    n = len(history)
    if not loop.past.control_variates or n <= loop.full_batch_rows:
        return None, False
    rows = int(state.anchor_rows)
    if (
        rows > 0
        and n < loop.past.anchor_growth * rows
        and not drifted(
            state.particles, state.log_weights, state.anchor_point, loop.past.anchor_drift
        )
    ):
        return Anchor(state.anchor_point, state.anchor_grad), False
    return anchor_at_mean(loop.model, state.particles, state.log_weights, history), True


def absorb_piece(
    loop: ChunkLoop,
    state: ParticleState,
    rows: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None,
    absorbed_rows: int,
) -> tuple[ParticleState, PieceReport]:
    anchor, reanchored = current_anchor(loop, state, history)
    if anchor is not None:
        anchor = with_piece(loop.model, anchor, rows)
    past = past_data(history, loop.full_batch_rows, loop.past.batch_size, anchor)
    careful = None
    # The careful ladder answers drift once the posterior has formed. While the past is used in
    # full, pieces anneal away from the prior and long ladders are expected; there, extra steps
    # of moves whose mass matrix is the covariance of only M particles bias log Ẑ upwards
    # (benchmarks/README.md, "calibration.py").
    if (
        loop.surprise is not None
        and loop.careful_parts is not None
        and len(history) > loop.full_batch_rows
    ):
        careful = (loop.surprise.steps, loop.careful_parts)
    piece = PieceParts(
        loop.model, rows, past, loop.parts, loop.past.anchor_drift, careful, loop.widen
    )
    tempered, steps = anneal(
        piece.first,
        start(piece.first, state.particles, state.log_weights),
        generator,
        loop.max_steps,
        deadline,
        absorbed_rows,
        piece.refresh,
    )
    anchor, reanchored = piece.anchor, reanchored or piece.moved
    theta, log_weights = tempered.particles, tempered.log_weights
    if theta.shape[0] != state.particles.shape[0]:
        assert loop.narrow is not None
        narrowed = loop.narrow(theta, log_weights, ess(log_weights), generator)
        assert narrowed.ancestors is not None
        next_eves = selected(log_weights, narrowed.ancestors)
        theta, log_weights = narrowed.particles, narrowed.log_weights
    else:
        next_eves = first_generation(log_weights)
    surprised = (
        loop.surprise is not None
        and loop.surprise.moves > 0
        and surprising(loop.surprise, steps, theta.shape[0])
    )
    if loop.surprise is not None and surprised:
        rejuvenated = rejuvenate(
            loop.model,
            loop.parts,
            loop.surprise.moves,
            theta,
            log_weights,
            rows,
            history,
            loop.full_batch_rows,
            loop.past.batch_size,
            loop.past.control_variates,
            generator,
            functools.partial(check_deadline, deadline, Progress(absorbed_rows, 1.0, len(steps))),
        )
        theta = rejuvenated.particles
        if rejuvenated.anchor is not None:
            anchor, reanchored = rejuvenated.anchor, True
    log_evidence = sum(info.log_evidence_increment for info in steps)
    delta_method = sum(info.log_evidence_increment_variance for info in steps)
    variance = (
        genealogy_variance(state, steps) if loop.standard_error == "genealogy" else delta_method
    )
    if anchor is not None and anchor.piece_grad is not None:
        # The piece joins the past: its gradient at θ_a joins the anchor's full-data sum.
        anchor = Anchor(anchor.point, anchor.grad_sum + anchor.piece_grad)
    new_state = ParticleState(
        particles=theta,
        log_weights=log_weights,
        log_evidence=state.log_evidence + log_evidence,
        log_evidence_variance=state.log_evidence_variance + variance,
        n_observations=state.n_observations + rows.count,
        anchor_point=state.anchor_point if anchor is None else anchor.point,
        anchor_grad=state.anchor_grad if anchor is None else anchor.grad_sum,
        anchor_rows=(
            torch.tensor(len(history), device=state.anchor_rows.device)
            if reanchored
            else state.anchor_rows
        ),
        restart_rows=state.restart_rows,
        astray_rows=state.astray_rows,
        **eve_fields(next_eves),
    )
    return new_state, PieceReport(
        log_evidence, variance, steps, reanchored, delta_method, surprised
    )


def genealogy_variance(state: ParticleState, steps: tuple[StepInfo, ...]) -> float:
    """The Eve variance (``smc.genealogy``) of a piece's ``steps`` from the Eves ``state``
    carries."""
    if not state.eves.numel():
        return eve_variance(first_generation(state.log_weights), steps)
    return eve_variance(Eves(state.eves, state.eve_weights, float(state.lost_eves)), steps)
