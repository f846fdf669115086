"""The state and the chunk loop shared by the online particle methods (sgais, sequential,
minibatch_mh, and hybrid after its nested phase).

A chunk is cut into schedule-sized pieces (``data.schedule``); each piece is annealed in by the
method's tempered-SMC parts (``smc.tempered``) against the past it follows, whose gradient uses a
control-variate anchor re-set at the weighted particle mean whenever n has grown by
``anchor_growth`` (one full pass at one point: the full-data cost stays amortised O(1) per row).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

from estimators.data.history import ExtendedHistory, History, Rows
from estimators.data.schedule import split_points
from estimators.deadline import Deadline, check_deadline
from estimators.errors import Progress
from estimators.estimator import Estimator, Update, lognormal_log_evidence, weighted_particles
from estimators.online.piece_parts import Parts, PieceParts
from estimators.online.reports import PieceReport, astray
from estimators.online.restart import Restart, reestimated, restart_due
from estimators.online.settings import PastDataSettings
from estimators.online.surprise import Surprise, drifted, rejuvenate, surprising
from estimators.online.target import Anchor, anchor_at_mean, past_data, with_piece
from estimators.settings import ParticleSettings
from estimators.smc.genealogy import eve_variance
from estimators.smc.resampling import Selection
from estimators.smc.tempered import anneal, start
from estimators.smc.weights import ess
from models import Model


class ParticleState(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,), normalised
    log_evidence: Tensor  # ()
    log_evidence_variance: Tensor  # () sum over pieces of their variances (``standard_error``)
    n_observations: Tensor  # () int64
    anchor_point: Tensor  # (D,) control-variate anchor θ_a
    anchor_grad: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)
    anchor_rows: Tensor  # () int64: rows seen when the anchor was set; 0 = no anchor yet
    # () int64: rows seen at the last re-estimate over all rows (``restart``); 0 = none. States
    # stored before the field existed load with the default.
    restart_rows: Tensor = torch.zeros((), dtype=torch.int64)
    # () int64: rows seen when a chunk first left the particles astray (``astray``) since then;
    # 0 = none
    astray_rows: Tensor = torch.zeros((), dtype=torch.int64)


class ChunkLoop(NamedTuple):
    """What an online method brings to the chunk loop."""

    model: Model
    past: PastDataSettings  # how the past is read: batch_size, control variates and anchors
    full_batch_rows: int
    parts: Parts  # the method's tempered-SMC parts for one piece
    max_steps: int  # annealing steps per piece; a safeguard
    # "genealogy": a piece's variance from its particles' Eve groups (``smc.genealogy``);
    # "delta": the sum of its steps' delta-method variances
    standard_error: str = "genealogy"
    surprise: Surprise | None = None  # more rejuvenation after a surprising piece (``surprise``)
    # the parts of a piece's steps past ``surprise.steps`` (``piece_parts``); None: ``parts``
    careful_parts: Parts | None = None
    # the careful parts' first selection, to more particles, and the one back at the piece's end
    widen: Selection | None = None
    narrow: Selection | None = None
    # re-estimates from the prior over the rows seen, shuffled (``restart``), and the prior
    # state they start from; None: never
    restart: Restart | None = None
    fresh: Callable[[torch.Generator], ParticleState] | None = None


InfoT = TypeVar("InfoT")
# (rows of the chunk, the state after it, what each piece did) -> the method's Info record
Report = Callable[[int, ParticleState, tuple[PieceReport, ...]], InfoT]


def chunk_update(loop: ChunkLoop, report: Report[InfoT]) -> Update[ParticleState, InfoT]:
    """``absorb`` with the method's parts, reported as the method's Info record."""

    def update(
        state: ParticleState,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[ParticleState, InfoT]:
        new_state, reports = absorb(loop, state, chunk, history, generator, deadline)
        return new_state, report(chunk.count, new_state, reports)

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
    if loop.restart is not None:
        # while the past is used in full, pieces anneal away from the prior: long ladders are
        # expected there, not a sign of trouble
        if (
            n > loop.full_batch_rows
            and not int(state.astray_rows)
            and astray(loop.surprise, tuple(reports), state.particles.shape[0])
        ):
            state = state._replace(astray_rows=state.n_observations.clone())
        if restart_due(loop.restart, int(state.n_observations), int(state.restart_rows),
                       int(state.astray_rows) > 0):
            assert loop.fresh is not None
            replay = functools.partial(absorb, loop._replace(restart=None))
            state = reestimated(replay, loop.fresh, state, history, chunk, generator, deadline)
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
        theta, log_weights = narrowed.particles, narrowed.log_weights
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
        eve_variance(state.log_weights, steps)
        if loop.standard_error == "genealogy"
        else delta_method
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
    )
    return new_state, PieceReport(
        log_evidence, variance, steps, reanchored, delta_method, surprised
    )
