"""The piece kernel of the online particle methods: one piece of a chunk annealed in against
the past it follows, and a chunk as its pieces in turn.

A piece goes through five parts, each replaceable: the control-variate anchor (``anchor``), the
past as the gradients read it (``target.past_data``), the method's tempered-SMC parts of each
step (``smc.tempered``), the annealing (``smc.tempered.anneal_planned``) and the variance rule
that gives the piece's variance of log Ẑ; a stream's first piece may start from a Gaussian
instead of the prior (``gaussian_start``). Extensions plug in at two points and nowhere else: a
``StepRule`` may change the parts of the next step from the state reached, and the ``AfterPiece``
functions follow the annealing (their order is the kernel's). A chunk is cut into
schedule-sized pieces (``data.schedule``) and each is absorbed in turn.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from modelcompare.estimators.data.history import ExtendedHistory, History, Rows
from modelcompare.estimators.data.schedule import split_points
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.online import anchor
from modelcompare.estimators.online.gaussian_start import GaussianReference, laplace_reference
from modelcompare.estimators.online.reports import ChunkReport, PieceReport
from modelcompare.estimators.online.settings import PastDataSettings
from modelcompare.estimators.online.spread import SPREAD_ROWS, relative_spread
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.online.target import Anchor, PastData, Piece, past_data, with_piece
from modelcompare.estimators.smc.mass import NO_POOL, MassPool
from modelcompare.estimators.smc.resampling import Selection
from modelcompare.estimators.smc.tempered import (
    StepInfo,
    TemperedSMC,
    TemperedState,
    anneal_planned,
    start,
)
from modelcompare.models import Model

Parts = Callable[[Piece], TemperedSMC]  # the method's tempered-SMC parts for one piece


class PieceEnv(NamedTuple):
    """What the extensions of a piece may read."""

    model: Model
    rows: Rows  # the piece
    history: History  # exactly the rows before it
    past: PastDataSettings
    full_batch_rows: int
    parts: Parts
    particles: int  # M, the count the state carries
    generator: torch.Generator
    deadline: Deadline | None
    absorbed_rows: int  # rows of the chunk before the piece (for progress reports)
    reference: GaussianReference | None = None  # the Gaussian start of a stream's first piece


class Adjustment(NamedTuple):
    make: Parts | None = None  # the piece's parts from this step on
    selection: Selection | None = None  # this step's selection alone


class StepRule(NamedTuple):
    """A plug-in that changes a piece's parts as its annealing goes: ``start`` gives its state
    for a piece (None: not active on it), ``update`` its adjustment at each later step from
    (its state, steps taken, λ reached)."""

    start: Callable[[PieceEnv], Any]
    update: Callable[[Any, int, float], tuple[Any, Adjustment]]


class Annealed(NamedTuple):
    """A piece after its annealing, as the ``AfterPiece`` extensions pass it on."""

    particles: Tensor
    log_weights: Tensor
    steps: tuple[StepInfo, ...]
    anchor: Anchor | None
    reanchored: bool  # the anchor was (re)set for or during the piece
    # (the log-weights drawn from, the ancestors) of a selection made after the last step
    selection: tuple[Tensor, Tensor] | None = None
    extra_moves: bool = False  # the particles were moved again after the annealing
    mass_pool: MassPool = NO_POOL  # the mass rule's pool after the last step


AfterPiece = Callable[[PieceEnv, Annealed], Annealed]
# (state, chunk, history, generator, deadline) -> the state after the chunk, and its report
ChunkUpdate = Callable[
    [ParticleState, Rows, History, torch.Generator, Deadline | None],
    tuple[ParticleState, ChunkReport],
]


class VarianceRule(Protocol):
    def __call__(
        self, before: ParticleState, after: ParticleState, piece: Annealed
    ) -> tuple[float, ParticleState]:
        """The piece's variance of log Ẑ, and ``after`` with the rule's slot brought along."""
        ...


class PieceKernel(NamedTuple):
    model: Model
    past: PastDataSettings  # how the past is read: batch_size, control variates and anchors
    full_batch_rows: int
    parts: Parts
    max_steps: int  # annealing steps per piece; a safeguard
    variance: VarianceRule
    step_rule: StepRule | None = None
    after: tuple[AfterPiece, ...] = ()
    # a stream's first rows, up to this many, are one piece annealed in from the Laplace
    # approximation of its posterior (``gaussian_start``; 0: from the prior)
    start_rows: int = 0


class StepPlan(NamedTuple):
    """What makes the next step's parts (``anneal_planned``'s plan)."""

    make: Parts
    past: PastData
    smc: TemperedSMC
    steps: int
    reanchored: bool
    rebuild: bool  # the last step had a selection of its own: the next one's parts are rebuilt
    rule: Any  # the step rule's state


def next_plan(kernel: PieceKernel, env: PieceEnv, plan: StepPlan, state: TemperedState) -> StepPlan:
    steps = plan.steps + 1
    make, past, rule, selection = plan.make, plan.past, plan.rule, None
    rebuild, reanchored = plan.rebuild, plan.reanchored
    if kernel.step_rule is not None and rule is not None:
        rule, adjustment = kernel.step_rule.update(rule, steps, state.temperature)
        make, selection = adjustment.make or make, adjustment.selection
        rebuild = rebuild or adjustment.make is not None or selection is not None
    moved = anchor.followed(
        env.model, env.rows, past, state.particles, state.log_weights, env.past.anchor_drift
    )
    if moved is not None:
        past, reanchored, rebuild = moved, True, True
    smc = plan.smc
    if rebuild:
        smc = make(Piece(env.model, env.rows, past, env.reference))
        smc = smc if selection is None else smc._replace(selection=selection)
    return StepPlan(make, past, smc, steps, reanchored, selection is not None, rule)


def anneal_piece(kernel: PieceKernel, env: PieceEnv, state: ParticleState) -> Annealed:
    """The anchor, the past, the parts and the annealing of one piece."""
    found, reanchored = anchor.piece_anchor(
        kernel.model, kernel.past, kernel.full_batch_rows, state, env.history
    )
    anchored = None if found is None else with_piece(kernel.model, found, env.rows)
    past = past_data(env.history, kernel.full_batch_rows, kernel.past.batch_size, anchored)
    smc = kernel.parts(Piece(kernel.model, env.rows, past, env.reference))
    rule = None if kernel.step_rule is None else kernel.step_rule.start(env)
    plan = StepPlan(kernel.parts, past, smc, 0, reanchored, False, rule)
    particles, log_weights = state.particles, state.log_weights
    if env.reference is not None:
        particles = env.reference.sample(env.particles, env.generator)
        log_weights = torch.full_like(log_weights, -math.log(env.particles))
    tempered, steps, plan = anneal_planned(
        plan,
        _parts_of,
        functools.partial(next_plan, kernel, env),
        start(smc, particles, log_weights, state.mass),
        env.generator,
        kernel.max_steps,
        env.deadline,
        env.absorbed_rows,
    )
    return Annealed(tempered.particles, tempered.log_weights, steps, plan.past.anchor,
                    plan.reanchored, mass_pool=tempered.mass_pool)


def _parts_of(plan: StepPlan) -> TemperedSMC:
    return plan.smc


def absorb_piece(
    kernel: PieceKernel, state: ParticleState, env: PieceEnv
) -> tuple[ParticleState, PieceReport]:
    """``state`` after the piece ``env.rows``: annealed in, followed by the kernel's
    extensions, its log Ẑ added and its variance by the kernel's rule."""
    piece = anneal_piece(kernel, env, state)
    for extension in kernel.after:
        piece = extension(env, piece)
    log_evidence = sum(info.log_evidence_increment for info in piece.steps)
    delta_method = sum(info.log_evidence_increment_variance for info in piece.steps)
    after = state._replace(
        particles=piece.particles,
        log_weights=piece.log_weights,
        log_evidence=state.log_evidence + log_evidence,
        n_observations=state.n_observations + env.rows.count,
        anchor=anchor.stored(state.anchor, piece.anchor, piece.reanchored, len(env.history)),
        mass=piece.mass_pool,
    )
    variance, after = kernel.variance(state, after, piece)
    after = after._replace(log_evidence_variance=state.log_evidence_variance + variance)
    return after, PieceReport(log_evidence, variance, piece.steps, piece.reanchored,
                              delta_method, piece.extra_moves, int(state.n_observations),
                              env.reference is not None)


def absorb_pieces(
    kernel: PieceKernel,
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
    reference, first = None, 0
    if n == 0 and kernel.start_rows and chunk.count:
        first = min(chunk.count, kernel.start_rows)
        reference = laplace_reference(kernel.model, chunk.slice(0, first), state.particles,
                                      deadline)
    reports = []
    for begin, end in split_points(n, chunk.count, first if reference is not None else 0):
        seen = ExtendedHistory(history, chunk.slice(0, begin)) if begin else history
        env = PieceEnv(kernel.model, chunk.slice(begin, end), seen, kernel.past,
                       kernel.full_batch_rows, kernel.parts, state.particles.shape[0],
                       generator, deadline, begin, reference if begin == 0 else None)
        state, report = absorb_piece(kernel, state, env)
        reports.append(report)
    return state, tuple(reports)


def absorb(
    kernel: PieceKernel,
    state: ParticleState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> tuple[ParticleState, ChunkReport]:
    """The chunk's pieces, and the cloud's spread after them on the chunks that cross a
    multiple of ``SPREAD_ROWS`` rows past the exact phase (while the past is used in full,
    pieces anneal away from the prior and the moves are exact: nothing to measure)."""
    n = int(state.n_observations)
    state, pieces = absorb_pieces(kernel, state, chunk, history, generator, deadline)
    if n <= kernel.full_batch_rows or n // SPREAD_ROWS == int(state.n_observations) // SPREAD_ROWS:
        return state, ChunkReport(pieces, False, math.nan)
    return state, ChunkReport(pieces, False, spread_after(kernel, state, history, chunk, generator))


def spread_after(
    kernel: PieceKernel,
    state: ParticleState,
    history: History,
    chunk: Rows,
    generator: torch.Generator,
) -> float:
    """The cloud's width in units of the posterior's (``spread``) once ``state`` has seen the
    rows of ``history`` and ``chunk``."""
    seen = ExtendedHistory(history, chunk)
    return relative_spread(kernel.model, state.particles, state.log_weights, seen, generator)
