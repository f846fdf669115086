"""The move kernels of the online methods, each built for one piece: ``(θ, λ, L, generator,
checkpoint) -> Moved`` on the piece's tempered target (``smc.tempered.Move``).

``exact_hmc`` while the past is used in full; after that ``sghmc`` (plain or with noise friction),
``corrected_sghmc`` (trajectories accepted by the minibatch Barker test) or ``random_walk_mh``.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from modelcompare.estimators.deadline import Checkpoint
from modelcompare.estimators.moves import random_walk
from modelcompare.estimators.moves.corrected import corrected_sghmc_move
from modelcompare.estimators.moves.hmc import HMCParams, hmc_chain
from modelcompare.estimators.moves.minibatch_target import MinibatchTarget
from modelcompare.estimators.moves.sghmc import (
    NoiseFactor,
    SGHMCParams,
    noise_factor,
    noise_limited,
    sghmc_move,
    sghmc_step,
    with_estimate_variance,
)
from modelcompare.estimators.online import precision
from modelcompare.estimators.online.settings import SequentialSettings
from modelcompare.estimators.online.target import (
    Piece,
    exact_target,
    grad_log_target,
    gradient_noise,
    minibatch_gradients,
    sampled_strata,
)
from modelcompare.estimators.smc.tempered import Move, Moved


def exact_hmc(piece: Piece, params: HMCParams, gradient_dtype: torch.dtype) -> Move:
    """``params.transitions`` Metropolis-corrected HMC transitions on the exact target, the
    leapfrog's inner gradients and its mass products computed in ``gradient_dtype`` where
    ``precision`` says so (``gradient_dtype``, ``mass_dtype``)."""
    dtype = precision.gradient_dtype(piece.model, gradient_dtype)
    mass_dtype = precision.mass_dtype(piece.model, gradient_dtype)

    def move(
        theta: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        target = exact_target(
            piece.model, piece.rows, temperature, piece.past, dtype, piece.reference
        )
        theta, acceptance = hmc_chain(
            theta, target.value_and_grad, scale.to(mass_dtype), params, generator, target.grad,
            checkpoint,
        )
        return Moved(theta, acceptance)

    return move


def _rows(piece: Piece, temperature: float) -> float:
    """Rows the tempered target holds: the past plus λ of the piece."""
    return len(piece.past.history) + temperature * piece.rows.count


def sghmc(piece: Piece, params: SGHMCParams, gradient_dtype: torch.dtype) -> Move:
    """One SGHMC trajectory on minibatch gradients of the past and, when it has more than
    ``piece_batch_size`` rows, of the piece (``moves.sghmc``, ``target.sampled_strata``),
    computed in ``gradient_dtype`` where ``precision`` says so (``gradient_dtype``), as are the
    mass products (``mass_dtype``). The gradient-noise estimate always passes over rows (per-row
    gradients of fresh rows), in the gradients' dtype: its sampling error, about √(2/R) relative
    from R rows, is far above float32's rounding, and float32 halves the friction's per-step
    cost, B̂u per particle (D = 161, 256 particles: 48 s of a chunk's CPU against 66 s in
    float64)."""
    dtype = precision.gradient_dtype(piece.model, gradient_dtype)
    mass_dtype = precision.mass_dtype(piece.model, gradient_dtype)

    def move(
        theta: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        past = piece.past
        fixed, strata = sampled_strata(piece.rows, temperature, past, params.piece_batch_size)
        grads = iter(
            minibatch_gradients(piece, fixed, strata, temperature, params.steps, generator, dtype)
        )

        def grad(position: Tensor) -> Tensor:
            return next(grads)(position)

        step, mass = sghmc_step(params, scale, _rows(piece, temperature))
        noise = None
        if params.noise_friction:

            def noise_at(position: Tensor) -> Tensor:
                return gradient_noise(
                    piece.model, position, strata, past.anchor, generator, mass, past.batch_size
                )

            noise = noise_at(theta.to(dtype))
            # one reduction: a sum is finite only where every term is (an overflowing sum of
            # finite terms recomputes too, as their squares would overflow the friction)
            if dtype != theta.dtype and not bool(torch.isfinite(noise.sum())):
                noise = noise_at(theta)  # beyond float32's range (3e38): in the state's dtype
        steps, friction_factor = params.steps, None
        if noise is not None:
            friction_factor, step, steps = friction_noise(params, noise_factor(noise), step)
            if steps > params.steps:
                more = minibatch_gradients(
                    piece, fixed, strata, temperature, steps - params.steps, generator, dtype
                )
                grads = itertools.chain(grads, more)
        moved = sghmc_move(
            theta, grad, step, mass.to(mass_dtype), params.friction, steps, generator,
            friction_factor,
        )
        return Moved(moved.position, (), float(moved.diverged.double().mean()))

    return move


def friction_noise(
    params: SGHMCParams, noise: NoiseFactor, step: float
) -> tuple[NoiseFactor, float, int]:
    """The noise factor the move's friction is made of, its step and its step count: the step
    shortened until the friction fits (``noise_limited``), the factor raised by its own sampling
    variance at that step where ``params.estimate_variance`` asks (``with_estimate_variance``)."""
    if not params.estimate_variance:
        return noise, *noise_limited(step, params.steps, noise, 1.0 - params.friction)
    raised = with_estimate_variance(noise, step, params.friction)
    limited, steps = noise_limited(step, params.steps, raised, 1.0 - params.friction)
    if limited != step:
        raised = with_estimate_variance(noise, limited, params.friction)
    return raised, limited, steps


def corrected_sghmc(piece: Piece, params: SGHMCParams) -> Move:
    """One SGHMC trajectory accepted or rejected as a whole by the minibatch Barker test."""

    def move(
        theta: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        def grad(position: Tensor) -> Tensor:
            return grad_log_target(
                piece.model, position, piece.rows, temperature, piece.past, generator
            )

        step, mass = sghmc_step(params, scale, _rows(piece, temperature))
        past = piece.past
        target = MinibatchTarget(piece.model, past.history, piece.rows, temperature, past.anchor)
        moved = corrected_sghmc_move(
            theta,
            target,
            grad,
            step,
            mass,
            params.friction,
            params.steps,
            past.batch_size,
            generator,
        )
        return Moved(moved.position, (float(moved.test.accept.double().mean()),))

    return move


def random_walk_mh(piece: Piece, steps: int) -> Move:
    """``steps`` random-walk MH steps per chain, proposal 2.38/√D × L (Roberts & Rosenthal
    2001, the optimal random-walk scale for Gaussian targets), minibatch Barker tests."""

    def move(
        theta: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        past = piece.past
        target = MinibatchTarget(piece.model, past.history, piece.rows, temperature, past.anchor)
        proposal_scale = 2.38 / math.sqrt(theta.shape[1]) * scale
        state = random_walk.init(theta)
        acceptance = []
        for walk_step in range(steps):
            if walk_step:
                checkpoint()
            state, info = random_walk.update(
                state, target, proposal_scale, past.batch_size, generator
            )
            acceptance.append(float(info.accepted.double().mean()))
        return Moved(state.position, tuple(acceptance))

    return move


def sghmc_moves(settings: SequentialSettings, piece: Piece) -> Move:
    """Exact HMC while the past is used in full, then SGHMC (Barker-corrected if asked)."""
    if piece.past_in_full:
        return exact_hmc(piece, settings.hmc, settings.gradient_precision)
    if settings.mh_correction == "barker":
        return corrected_sghmc(piece, settings.sghmc)
    return sghmc(piece, settings.sghmc, settings.gradient_precision)
