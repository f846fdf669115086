"""One tempered-SMC step from replaceable parts, and the loop that anneals a piece of data in.

The target at temperature λ is π_λ(θ) ∝ π₀(θ) · p(piece | θ)^λ, π₀ what the particles already
represent. One step (Del Moral, Doucet & Jasra 2006, eq. 14; BlackJAX ``smc/tempered.py``):

1. the temperature rule picks Δ; the weights become W_i ∝ W_i · p(piece | θ_i)^Δ and
   log Σ_i W_i p(piece | θ_i)^Δ is the step's log-evidence increment (with ``control``, the
   first step's sum corrected by control variates of known zero mean under π₀:
   ``smc.control_variates``);
2. ``relabel`` (if any) maps every particle into one labelling of a label-symmetric posterior;
3. the mass rule gives the factor L (L Lᵀ = the weighted particle covariance, or that pooled
   with the earlier steps': ``smc.mass``), taken before resampling, while the weights still
   carry the target;
4. the selection rule resamples (or drops the weights);
5. the move kernel moves the particles at the new λ with that mass factor; a particle it left
   outside the model's domain or astronomically far into the tails is put back (``settled``).

``anneal`` repeats the step until λ = 1, so log p(piece | past) is a sum of per-step increments
of normalised weights. The parts are plain functions: SG-AIS, sequential SGHMC, minibatch MH
and AIS are compositions of them (``modelcompare.estimators.online``,
``modelcompare.estimators.references.ais``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol, TypeVar

import torch
from torch import Tensor

from modelcompare.estimators.deadline import Checkpoint, Deadline, check_deadline
from modelcompare.estimators.errors import EstimatorError, Progress
from modelcompare.estimators.smc.control_variates import controlled_log_mean_increment
from modelcompare.estimators.smc.mass import NO_POOL, MassPool, MassRule, particle_mass
from modelcompare.estimators.smc.relabeling import Relabel
from modelcompare.estimators.smc.resampling import Selection
from modelcompare.estimators.smc.temperature import SMALLEST_STEP, TemperatureRule
from modelcompare.estimators.smc.weights import ess, log_mean_increment, log_normalize

PlanT = TypeVar("PlanT")  # what decides each step's parts (``anneal_planned``)
# Stan's threshold on a trajectory's energy error, here on the loss of λ·log p(piece | θ) a
# move brings a particle beyond the cloud's spread (``settled``)
DIVERGED_NATS = 1000.0


class TemperedState(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,) normalised
    log_likelihood: Tensor  # (M,) log p(piece | θ_i), untempered: what the next Δ multiplies
    temperature: float  # λ reached
    mass_pool: MassPool = NO_POOL  # what the mass rule carries from step to step


class Moved(NamedTuple):
    particles: Tensor  # (M, D)
    acceptance: tuple[float, ...]  # mean acceptance of each Metropolis-tested transition
    # fraction of the unadjusted trajectories undone as diverged (None: no such trajectories)
    diverged: float | None = None


class Move(Protocol):
    def __call__(
        self,
        particles: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        """Move the particles on π_λ with mass factor ``scale`` (M⁻¹ = L Lᵀ); ``checkpoint``
        between transitions."""
        ...


# (θ (M, D), generator) -> (M, K) functions of each particle with zero mean under π₀
Control = Callable[[Tensor, torch.Generator], Tensor]


class TemperedSMC(NamedTuple):
    """The parts of one tempered-SMC step."""

    log_likelihood: Callable[[Tensor], Tensor]  # θ (M, D) -> log p(piece | θ) (M,)
    temperature_rule: TemperatureRule
    selection: Selection
    move: Move
    relabel: Relabel | None = None  # one labelling of a label-symmetric posterior
    control: Control | None = None  # control variates of the first step's increment
    mass: MassRule = particle_mass  # the moves' mass factor (``smc.mass``)


class StepInfo(NamedTuple):
    log_evidence_increment: float
    log_evidence_increment_variance: float  # delta-method variance (``log_mean_increment``)
    ess: float  # after reweighting, before the selection
    resampled: bool
    acceptance: tuple[float, ...]
    # the genealogy (``smc.genealogy``): the normalised log-weights after reweighting, before
    # the selection, and the selection's ancestor indices (None: not resampled)
    reweighted_log_weights: Tensor | None = None
    ancestors: Tensor | None = None
    # the move's ``Moved.diverged`` plus the fraction ``settled`` undid (None: neither reports)
    diverged: float | None = None
    # (M,) each particle's share of the control variates' correction (``control_variates``),
    # indexed as ``reweighted_log_weights``; None: a plain increment
    control_influence: Tensor | None = None


def start(
    smc: TemperedSMC, particles: Tensor, log_weights: Tensor, mass_pool: MassPool = NO_POOL
) -> TemperedState:
    """λ = 0: the particles as they are, and the mass rule's pool so far."""
    return TemperedState(
        particles, log_weights, checked_log_likelihood(smc.log_likelihood(particles)), 0.0,
        mass_pool,
    )


def step(
    smc: TemperedSMC, state: TemperedState, generator: torch.Generator, checkpoint: Checkpoint
) -> tuple[TemperedState, StepInfo]:
    remaining = 1.0 - state.temperature
    delta = smc.temperature_rule(state.log_weights, state.log_likelihood, remaining)
    if delta < SMALLEST_STEP * remaining:
        spread = float(state.log_likelihood.max() - state.log_likelihood.min())
        raise EstimatorError(
            f"annealing stalled at λ = {state.temperature:.3g}: the log-likelihood spans "
            f"{spread:.3g} nats across particles"
        )
    increments = delta * state.log_likelihood
    influence = None
    # Only the first step is controlled: there the particles have been moved on π₀ ever since
    # they last changed weight. Later in the ladder each step's cloud trails its target by one
    # move, the controls' mean is not 0 there, and correcting every step of a 52-step ladder
    # biased log Ẑ by −0.18 nats (linear regression, first 500 rows, 30 seeds) where the plain
    # increments' errors cancel along the genealogy.
    if smc.control is None or state.temperature > 0.0:
        increment, variance = log_mean_increment(state.log_weights, increments)
    else:
        # two draws: where the controls are minibatch estimates, the fit reads the second
        controls = smc.control(state.particles, generator)
        fit_controls = smc.control(state.particles, generator)
        increment, variance, influence = controlled_log_mean_increment(
            state.log_weights, increments, controls, fit_controls
        )
    log_weights = log_normalize(state.log_weights + increments)
    temperature = 1.0 if delta >= remaining else state.temperature + delta
    theta = state.particles
    if smc.relabel is not None:
        theta = smc.relabel(theta, log_weights)  # the likelihood is unchanged by relabelling
    scale, mass_pool = smc.mass(theta, log_weights, state.mass_pool)
    current_ess = ess(log_weights)
    selected = smc.selection(theta, log_weights, current_ess, generator)
    moved = smc.move(selected.particles, temperature, scale, generator, checkpoint)
    start_likelihood = (state.log_likelihood if selected.ancestors is None
                        else state.log_likelihood[selected.ancestors])
    kept = settled(smc, selected.particles, moved.particles, temperature, start_likelihood)
    after = TemperedState(kept.particles, selected.log_weights, kept.log_likelihood, temperature,
                          mass_pool)
    diverged = moved.diverged
    if kept.undone:
        diverged = (diverged or 0.0) + kept.undone
    return after, StepInfo(
        increment,
        variance,
        current_ess,
        selected.resampled,
        moved.acceptance,
        log_weights,
        selected.ancestors,
        diverged,
        influence,
    )


def anneal(
    smc: TemperedSMC,
    state: TemperedState,
    generator: torch.Generator,
    max_steps: int,
    deadline: Deadline | None = None,
    absorbed_rows: int = 0,
) -> tuple[TemperedState, tuple[StepInfo, ...]]:
    """Steps with the parts ``smc`` until λ = 1 (``anneal_planned`` with one plan)."""
    final, steps, _ = anneal_planned(
        smc, _as_parts, None, state, generator, max_steps, deadline, absorbed_rows
    )
    return final, steps


def _as_parts(smc: TemperedSMC) -> TemperedSMC:
    return smc


def anneal_planned(
    plan: PlanT,
    parts: Callable[[PlanT], TemperedSMC],
    advance: Callable[[PlanT, TemperedState], PlanT] | None,
    state: TemperedState,
    generator: torch.Generator,
    max_steps: int,
    deadline: Deadline | None = None,
    absorbed_rows: int = 0,
) -> tuple[TemperedState, tuple[StepInfo, ...], PlanT]:
    """Steps until λ = 1, each with the ``parts`` of the plan at hand, the plan ``advance``d from
    the state each step reaches (e.g. a move kernel re-set where the particles now are); the
    state, the steps and the last plan. ``EstimatorError`` after ``max_steps`` (a safeguard),
    ``BudgetExceeded`` (reporting ``absorbed_rows`` and λ) once ``deadline`` has passed."""
    steps: list[StepInfo] = []
    while state.temperature < 1.0:
        if advance is not None and steps:
            plan = advance(plan, state)
        progress = Progress(absorbed_rows, state.temperature, len(steps))
        check_deadline(deadline, progress)
        if len(steps) >= max_steps:
            raise EstimatorError(
                f"annealing reached only λ = {state.temperature:.3g} in {len(steps)} steps; "
                "the data is far outside what the particles can explain"
            )

        def checkpoint(progress: Progress = progress) -> None:
            check_deadline(deadline, progress)

        state, info = step(parts(plan), state, generator, checkpoint)
        steps.append(info)
    return state, tuple(steps), plan


class Settled(NamedTuple):
    particles: Tensor  # (M, D)
    log_likelihood: Tensor  # (M,) checked
    undone: float  # the fraction of the particles put back where they were


def settled(
    smc: TemperedSMC, before: Tensor, after: Tensor, temperature: float, start_likelihood: Tensor
) -> Settled:
    """The particles after a move and their log-likelihoods (checked), where a particle the move
    left outside the model's domain (log-likelihood NaN) or diverged is put back where it was
    (``start_likelihood``: its log-likelihood there), like a rejected proposal.

    Diverged: the move lowered λ·log p(piece | θ) by ``DIVERGED_NATS`` more than the spread of
    the particles' log-likelihoods before it. An exact move on π_λ takes a particle from one
    typical point to another and cannot lose that much on one term of its log-density; an
    unadjusted one (SGHMC) can: on an exp-link model a step too long for the particle's curvature
    lands where the likelihood is e^-10^37, and such particles, weighted out only at the next
    step, widened the next mass matrix tenfold and took half the cloud with them (Poisson
    regression with 100 inputs, log Ẑ 2 nats low in one chunk)."""
    log_likelihood = smc.log_likelihood(after)
    finite = start_likelihood[torch.isfinite(start_likelihood)]
    spread = float(finite.max() - finite.min()) if finite.numel() else 0.0
    lost = temperature * (start_likelihood - log_likelihood - spread)
    undone = torch.isnan(log_likelihood) | (lost > DIVERGED_NATS)
    if not bool(undone.any()):
        return Settled(after, checked_log_likelihood(log_likelihood), 0.0)
    after = torch.where(undone[:, None], before, after)
    log_likelihood = torch.where(undone, start_likelihood, log_likelihood)
    return Settled(after, checked_log_likelihood(log_likelihood), float(undone.double().mean()))


def checked_log_likelihood(log_likelihood: Tensor) -> Tensor:
    """Per-particle log-likelihoods (M,), or ``EstimatorError`` when some are NaN or none is
    finite (nothing to anneal towards)."""
    if torch.isnan(log_likelihood).any():
        raise EstimatorError("the model's log-likelihood is NaN for some particle")
    if not torch.isfinite(log_likelihood).any():
        raise EstimatorError(
            "the data has zero likelihood (log-likelihood −∞ or +∞) under every particle"
        )
    return log_likelihood
