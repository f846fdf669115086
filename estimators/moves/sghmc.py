"""Stochastic-gradient HMC moves (Chen, Fox & Guestrin 2014, eq. 15), in whitened velocity u:

    u ← (I − αI − B̂) u + η Lᵀ∇̂log π(θ) + N(0, 2αη I),    θ ← θ + L u,    u₀ ~ N(0, η I)

with M⁻¹ = L Lᵀ a constant preconditioner (Ma, Chen & Fox 2015). The minibatch gradient ∇̂ of
covariance V adds η² LᵀVL of noise per step on top of the injected 2αη I; B̂ = η LᵀVL / 2 is the
matching friction, so dissipation again balances the total noise and the moves sample π rather
than a law hotter along the noisiest directions. Eq. 15 subtracts B̂ from the injected noise
instead, which is impossible where B̂ exceeds αI (it does on softmax regression:
benchmarks/sgais_noise.py); raising the friction needs no such room. B̂ = 0 is plain SGHMC.

B̂ is estimated from R fresh rows, B̂ = Σ_r b_r b_rᵀ, and the law of the moves is convex in the
friction. Along a direction of total friction F = α + B the velocity's stationary variance is
∝ 1 / (1 − a²), a = 1 − F; with the estimate's error e it is on average (1 + E[e²] (1/c + 4a²/c²))
times that, c = 1 − a² (expand (I − (aI − e)²)⁻¹ to second order), so an unbiased B̂ still runs
hot, by about E[e²]/α², and more for heavy-tailed rows (Poisson regression with 100 inputs:
1.8% wide, benchmarks/move_width.py). A friction raised by Δ cools it by 2aΔ/c, so
``with_estimate_variance`` raises B̂ by k(F) E[e²] with k = (c + 4a²) / (2ac), F taken as α plus
B̂'s mean eigenvalue; E[e²] = Σ_r E[‖b_r‖² b_r b_rᵀ] − B²/R is estimated from the same rows by
Σ_r ‖b_r‖² b_r b_rᵀ (the B²/R term, 1/D of it for a spread spectrum, is left out).

The total friction cannot pass 1, so B̂ ≤ (1 − α)I; where a particle's noise needs more, a move
shortens its step for every particle alike (``noise_limited``) until each B̂ fits: B̂ grows with
η, and along a direction where B̂ is clipped by a factor k the chain runs about k times hotter than
π (Poisson regression with 100 inputs: k up to 40, log Z 4–9 nats low).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.moves.metric import to_position, whitened

GradFn = Callable[[Tensor], Tensor]
DIVERGED = 1e3  # whitened distance (in posterior spreads) past which a trajectory has diverged
# a move whose step ``noise_limited`` shortens takes at most this many times its steps
MAX_STEPS_FACTOR = 4
# the largest total friction F the gain of ``with_estimate_variance`` is computed at
GAIN_FRICTION = 0.9


class Trajectories(NamedTuple):
    position: Tensor  # (M, D) where each trajectory ended, or its start where it diverged
    diverged: Tensor  # (M,) bool: undone as diverged


class NoiseFactor(NamedTuple):
    """A factor G L (M, R, D) of each particle's whitened gradient-noise covariance LᵀV_mL =
    (G_m L)ᵀ G_m L (``target.gradient_noise``) and its rows' squared norms (M, R), taken once
    (``noise_factor``): the friction's trace, its estimate's variance and the finiteness check
    all read them, and each pass over the factor costs about what a trajectory's gradients do
    (D = 161, 256 particles: 14 ms)."""

    factor: Tensor
    row_norms: Tensor


class SGHMCParams(NamedTuple):
    lr: float  # η = lr / n (identity) or lr with the particle covariance as inverse mass
    friction: float  # α: momentum decay per step
    steps: int  # steps per move (one trajectory, fresh momentum)
    preconditioner: Literal["identity", "particles"]
    noise_friction: bool  # raise the friction by the estimated gradient noise (B̂ below)
    estimate_variance: bool  # and by the sampling variance of that estimate (``with_estimate_...``)
    piece_batch_size: int  # rows of the piece per gradient (``online.target.sampled_strata``)


def sghmc_step(params: SGHMCParams, particle_factor: Tensor, rows: float) -> tuple[float, Tensor]:
    """SGHMC step η and mass factor L (M⁻¹ = L Lᵀ) for a target holding ``rows`` rows.

    identity: η = lr / n and L = I, the O(1/n) step of the SG-AIS literature (n floored at 1,
    the prior's weight). particles: η = lr and L Lᵀ = the particle covariance ≈ (n F)⁻¹ for a
    posterior with per-row Fisher information F, i.e. the same lr / n step in F's metric.
    """
    if params.preconditioner == "identity":
        eye = torch.eye(
            particle_factor.shape[0], dtype=particle_factor.dtype, device=particle_factor.device
        )
        return params.lr / max(rows, 1.0), eye
    return params.lr, particle_factor


def sghmc_move(
    theta: Tensor,
    grad_log_target: GradFn,
    step: float,
    scale: Tensor,
    friction: float,
    steps: int,
    generator: torch.Generator,
    gradient_noise: NoiseFactor | None = None,
) -> Trajectories:
    """``steps`` SGHMC steps from ``theta`` (M, D) with a fresh momentum: the new positions.

    ``scale`` is L with M⁻¹ = L Lᵀ; the products with it compute in its dtype (``metric``).
    ``gradient_noise`` is the particles' ``NoiseFactor``; without it the noise is taken as
    zero.
    """
    start, noise_scale = theta, (2.0 * friction * step) ** 0.5
    shape, dtype, device = theta.shape, theta.dtype, theta.device
    velocity = standard_normal(shape, generator, dtype, device).mul_(step**0.5)
    extra_friction = None
    if gradient_noise is not None:
        extra_friction = noise_friction(gradient_noise, step, 1.0 - friction)
    # each step's velocity, for the distance travelled
    velocities = torch.empty((steps, *shape), dtype=dtype, device=device)
    for index in range(steps):
        damped = (1.0 - friction) * velocity
        if extra_friction is not None:
            damped.sub_(extra_friction(velocity))
        noise = standard_normal(shape, generator, dtype, device)
        velocity = whitened(step * grad_log_target(theta), scale, out=velocities[index])
        velocity.add_(damped).add_(noise.mul_(noise_scale))
        theta = theta + to_position(velocity, scale)
    travelled = torch.linalg.vector_norm(velocities, dim=-1).sum(0)
    # A trajectory that diverged (a step too long for a sharp direction of a far-from-Gaussian
    # posterior, e.g. a mixture whose components the data do not yet identify: it grows
    # geometrically) is undone like a rejected HMC proposal. In the whitened metric a healthy
    # trajectory travels about steps·√(η D) spreads; one that travelled DIVERGED has blown up.
    kept = torch.isfinite(theta).all(-1) & (travelled < DIVERGED)
    return Trajectories(torch.where(kept[:, None], theta, start), ~kept)


def noise_limited(
    step: float, steps: int, gradient_noise: NoiseFactor, ceiling: float
) -> tuple[float, int]:
    """The step η·s and step count of a move whose noise friction B̂ = η LᵀVL / 2 stays within
    ``ceiling`` for every particle: s = min(1,
    ceiling / max_m λ_max(B̂_m)), one s for all particles so that they all move by the same
    kernel. Steps × 1/√s keep the distance a move travels (about steps·√η spreads per
    direction), at most ``MAX_STEPS_FACTOR`` times ``steps``."""
    # tr B̂ = η ‖G L‖²_F / 2 bounds λ_max(B̂) without a matrix product: a move whose noise is
    # well within the ceiling (nearly all of them) needs no more
    if bool((0.5 * step * gradient_noise.row_norms.sum(1) < 0.999 * ceiling).all()):
        return step, steps
    shrink = ceiling_shrink_of(gradient_noise, step, ceiling)
    if shrink is None:
        return step, steps
    fraction = float(shrink.min())
    return step * fraction, min(MAX_STEPS_FACTOR * steps, math.ceil(steps / fraction**0.5))


def with_estimate_variance(
    gradient_noise: NoiseFactor, step: float, friction: float
) -> NoiseFactor:
    """``gradient_noise`` whose friction at step η is B̂ + k Σ_r ‖b_r‖² b_r b_rᵀ, b_r = √(η/2)
    (G L)_r, k = k(F) per particle (module docstring): row r times √(1 + k ‖b_r‖²)."""
    factor, row_norms = gradient_noise
    row_friction = row_norms.mul(0.5 * step)  # ‖b_r‖²
    # F = α + tr B̂ / D, at most GAIN_FRICTION: at F → 1 no friction cools (a → 0, k → ∞)
    total = (friction + row_friction.sum(1, keepdim=True) / factor.shape[-1]).clamp_(
        max=GAIN_FRICTION)
    keep = 1.0 - total
    damping = 1.0 - keep.square()
    gain = row_friction.mul_((damping + 4.0 * keep.square()) / (2.0 * keep * damping)).add_(1.0)
    return NoiseFactor(factor * gain.sqrt()[..., None], row_norms * gain)


def standard_normal(
    shape: torch.Size, generator: torch.Generator, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """N(0, I) draws in ``dtype``, drawn in float32: on a CPU 4–5× faster than float64. Their law
    differs from N(0, 1) only at float32's resolution (tails cut near 5.8σ, probability 1e-8),
    and SGHMC has no accept test that could tell."""
    return torch.randn(shape, generator=generator, dtype=torch.float32, device=device).to(dtype)


def noise_friction(
    gradient_noise: NoiseFactor, step: float, ceiling: float
) -> Callable[[Tensor], Tensor]:
    """u ↦ B̂u per particle, B̂ = η LᵀVL / 2 = UᵀU, shrunk per particle so B̂ ≤ ``ceiling``·I;
    ``gradient_noise``'s factor is G L with V = GᵀG.

    The ceiling keeps the total friction at most 1 (no velocity sign flips); where it binds the
    noisiest direction of that particle stays hotter than π by the clipped amount, which is why
    the online kernels first shorten the step until it does not (``noise_limited``). B̂ is kept as
    the smaller of the D × D matrix and its R × D factor U, in the factor's dtype (the moves'
    gradient precision, ``online.precision``); u and B̂u are in the state's.
    """
    friction = friction_of(gradient_noise.factor, step)
    shrink = ceiling_shrink_of(gradient_noise, step, ceiling, friction)
    if is_factor(gradient_noise.factor):
        factor = friction if shrink is None else (
            friction * shrink.sqrt().to(friction.dtype)[:, None, None])
        return in_dtype_of(
            factor.dtype,
            lambda velocity: torch.bmm(torch.bmm(velocity, factor.transpose(1, 2)), factor),
        )
    matrix = friction if shrink is None else friction * shrink.to(friction.dtype)[:, None, None]
    return in_dtype_of(matrix.dtype, lambda velocity: torch.bmm(velocity, matrix))


def noise_factor(factor: Tensor) -> NoiseFactor:
    """``factor`` G L (M, R, D) with its rows' squared norms, in float64 where they overflow its
    dtype; a particle whose noise is not finite even in float64 (its gradients overflow, so its
    trajectory diverges and is undone) has its noise zeroed and gets no extra friction: no
    eigensolver converges on it."""
    row_norms = factor.square().sum(-1)
    finite = torch.isfinite(row_norms.sum(1))
    if factor.dtype != torch.float64 and not bool(finite.all()):
        factor = factor.to(torch.float64)  # its squares overflow float32
        row_norms = factor.square().sum(-1)
        finite = torch.isfinite(row_norms.sum(1))
    if not bool(finite.all()):
        factor = torch.where(finite[:, None, None], factor, 0.0)
        row_norms = torch.where(finite[:, None], row_norms, 0.0)
    return NoiseFactor(factor, row_norms)


def is_factor(factor: Tensor) -> bool:
    """Whether B̂ is kept as its R × D factor U (fewer rows than parameters) or as D × D."""
    rows, dim = factor.shape[1:]
    return dim > rows


def friction_of(factor: Tensor, step: float) -> Tensor:
    """U = √(η/2) G L (M, R, D) where R < D, else B̂ = UᵀU (M, D, D)."""
    if is_factor(factor):
        return (0.5 * step) ** 0.5 * factor
    return (factor.transpose(1, 2) @ factor).mul_(0.5 * step)


def ceiling_shrink_of(
    gradient_noise: NoiseFactor, step: float, ceiling: float, friction: Tensor | None = None
) -> Tensor | None:
    """``ceiling_shrink`` of B̂ at step η (``friction``: ``friction_of`` it, if made already)."""
    if friction is None:
        friction = friction_of(gradient_noise.factor, step)
    trace = 0.5 * step * gradient_noise.row_norms.sum(1)  # tr UᵀU = ‖U‖²_F
    if is_factor(gradient_noise.factor):
        return ceiling_shrink(trace, lambda: gram(friction), ceiling)
    return ceiling_shrink(trace, lambda: friction.to(torch.float64), ceiling)


def ceiling_shrink(
    trace: Tensor, gram_of: Callable[[], Tensor], ceiling: float
) -> Tensor | None:
    """Per particle, min(1, ``ceiling`` / λ_max(B̂)) from B̂'s ``trace`` (M,) and ``gram_of``: a
    (M, k, k) in float64 with B̂'s nonzero eigenvalues (B̂ = UᵀU itself, or UUᵀ); None where no
    particle needs shrinking.

    λ_max ≤ ‖B̂‖_F ≤ tr B̂. ‖B̂‖_F = ‖UUᵀ‖_F costs a Gram product, about a tenth of an
    eigensolver's or an SVD's time (M = 256, R = 100, D = 161: 27 ms against 204 ms for the
    SVD), so the eigensolver runs only on the particles whose Frobenius bound exceeds the
    ceiling; the others' factor is exactly 1, as it was when every particle's λ_max was computed.
    float64: LAPACK's float32 eigensolver fails to converge on ill-conditioned matrices.
    """
    if bool((trace <= ceiling).all()):
        return None
    gram = gram_of()
    over = gram.square().sum((1, 2)).sqrt() > ceiling
    if not bool(over.any()):
        return None
    largest = torch.linalg.eigvalsh(gram[over])[:, -1]
    shrink = torch.ones(trace.shape, dtype=torch.float64, device=trace.device)
    shrink[over] = torch.clamp(ceiling / largest, max=1.0)
    return shrink


def gram(factor: Tensor) -> Tensor:
    """UUᵀ (M, R, R) in float64 for U (M, R, D): B̂ = UᵀU's nonzero eigenvalues."""
    wide = factor.to(torch.float64)
    return torch.bmm(wide, wide.transpose(1, 2))


def in_dtype_of(
    dtype: torch.dtype, product: Callable[[Tensor], Tensor]
) -> Callable[[Tensor], Tensor]:
    """u (M, D) ↦ ``product`` of u as (M, 1, D) rows, computed in ``dtype`` and returned in u's
    dtype as (M, D); no conversions where the dtypes agree (the per-step cost matters)."""
    if dtype == torch.float64:
        return lambda velocity: product(velocity[:, None, :])[:, 0]
    return lambda velocity: product(velocity[:, None, :].to(dtype))[:, 0].to(velocity.dtype)
