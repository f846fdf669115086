"""New live points for nested sampling: draws from the prior restricted to log L > L*.

``reflective_hmc`` is Galilean / reflective HMC (Skilling 2012; Betancourt 2011): leapfrog on the
prior potential −log p(θ) with the live-point covariance as inverse mass matrix, where a drift that
lands outside the contour reflects the velocity off it. In whitened momentum q (θ̇ = L q, M⁻¹ = L
Lᵀ) the contour normal is n̂ = Lᵀ∇log L / |Lᵀ∇log L| at the landing point θ₁. There the walker takes
a half kick, the reflection q ← q − 2 n̂ (q·n̂), another half kick, and drifts on to θ₂ = θ₁ + ε L
q: two leapfrog steps with the reflection in the middle of the kick between them (without that kick
every reflection costs an O(ε·√D) energy error, which lowers the acceptance in high dimensions:
benchmarks/README.md). If θ₂ is outside too the walker stays and its momentum reverses. Each branch
is volume-preserving and reversible (the reflection is taken at θ₁, which the reversed drift
revisits, between symmetric kicks), and reflection keeps |q|, so a Metropolis test on H = −log p(θ)
+ |q|²/2 leaves the prior restricted to the contour invariant.

``rejection`` draws from the prior until enough points beat L*: exact, for tiny problems only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.moves.hmc import HMCParams
from modelcompare.models import Model

LikelihoodFn = Callable[[Tensor], Tensor]  # θ (k, D) -> full-data log L (k,)
LikelihoodGradFn = Callable[[Tensor], tuple[Tensor, Tensor]]  # θ -> (log L (k,), ∇ (k, D))


class Contour(NamedTuple):
    """The prior of ``model`` restricted to log L > ``threshold``."""

    model: Model
    threshold: float
    log_lik: LikelihoodFn
    log_lik_and_grad: LikelihoodGradFn


class Landing(NamedTuple):
    """Where a drift landed: the points, their ∇ log L, and which walkers are outside."""

    points: Tensor
    grad: Tensor
    outside: Tensor


class MoveReport:
    """Counts over the moves of one nested-sampling run."""

    def __init__(self) -> None:
        self.evaluations = 0  # full-data log L (or log L + gradient) evaluations, per point
        self.accepted = 0
        self.proposed = 0
        self.reflections = 0
        self.reversals = 0
        self.drifts = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")


def reflective_hmc(
    contour: Contour,
    start: Tensor,
    start_log_lik: Tensor,
    scale: Tensor,
    params: HMCParams,
    generator: torch.Generator,
    report: MoveReport,
) -> tuple[Tensor, Tensor]:
    """One constrained HMC trajectory per walker from ``start`` (k, D), all inside the contour;
    returns the new points and their log L. ``params.transitions`` is not used here (the caller
    runs that many trajectories)."""
    model, threshold = contour.model, contour.threshold
    step_scale, leapfrog_steps = params.step_scale, params.leapfrog_steps
    k = start.shape[0]
    dtype, device = start.dtype, start.device
    eps = step_scale * (0.5 + torch.rand(k, 1, generator=generator, dtype=dtype, device=device))
    q0 = torch.randn(start.shape, generator=generator, dtype=dtype, device=device)
    theta, ll = start, start_log_lik
    q = q0 + 0.5 * eps * (model.grad_log_prior(theta) @ scale)
    for i in range(leapfrog_steps):
        landed = theta + eps * (q @ scale.T)
        landed_ll, landed_grad = contour.log_lik_and_grad(landed)
        report.evaluations += k
        inside = landed_ll > threshold
        theta = torch.where(inside[:, None], landed, theta)
        ll = torch.where(inside, landed_ll, ll)
        outside = torch.nonzero(~inside).flatten()
        if outside.numel():
            landing = Landing(landed, landed_grad, outside)
            theta, q, ll = _reflect(contour, theta, q, ll, landing, eps, scale)
            report.evaluations += outside.numel()
            report.reflections += outside.numel()
        report.drifts += k
        kick = 0.5 if i == leapfrog_steps - 1 else 1.0
        q = q + kick * eps * (model.grad_log_prior(theta) @ scale)
    log_accept = (model.log_prior(theta) - 0.5 * (q * q).sum(-1)) - (
        model.log_prior(start) - 0.5 * (q0 * q0).sum(-1)
    )
    log_accept = torch.nan_to_num(log_accept, nan=-torch.inf)
    accept = torch.log(torch.rand(k, generator=generator, dtype=dtype, device=device)) < log_accept
    report.accepted += int(accept.sum())
    report.proposed += k
    return torch.where(accept[:, None], theta, start), torch.where(accept, ll, start_log_lik)


def _reflect(
    contour: Contour,
    theta: Tensor,
    q: Tensor,
    ll: Tensor,
    landing: Landing,
    eps: Tensor,
    scale: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Kick, reflect and kick the walkers outside at their landing points, then drift on; a
    walker whose second drift also lands outside stays where it was, momentum reversed."""
    model, outside, landed = contour.model, landing.outside, landing.points
    normal = landing.grad[outside] @ scale  # Lᵀ∇log L as rows: the normal in whitened space
    normal = normal / normal.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    q_out, eps_out, landed_out = q[outside], eps[outside], landed[outside]
    half_kick = 0.5 * eps_out * (model.grad_log_prior(landed_out) @ scale)
    kicked = q_out + half_kick
    reflected = kicked - 2.0 * normal * (kicked * normal).sum(-1, keepdim=True) + half_kick
    second = landed_out + eps_out * (reflected @ scale.T)
    second_ll = contour.log_lik(second)
    inside = second_ll > contour.threshold
    theta = theta.clone()
    q = q.clone()
    ll = ll.clone()
    theta[outside] = torch.where(inside[:, None], second, theta[outside])
    ll[outside] = torch.where(inside, second_ll, ll[outside])
    q[outside] = torch.where(inside[:, None], reflected, -q_out)
    return theta, q, ll


def rejection(
    contour: Contour,
    count: int,
    generator: torch.Generator,
    report: MoveReport,
    batch: int = 4096,
    max_draws: int = 100_000_000,
) -> tuple[Tensor, Tensor]:
    """``count`` independent prior draws inside the contour, by rejection."""
    model, threshold, log_lik = contour.model, contour.threshold, contour.log_lik
    points: list[Tensor] = []
    values: list[Tensor] = []
    found, draws = 0, 0
    while found < count:
        if draws >= max_draws:
            raise EstimatorError(
                f"rejection sampling found {found} of {count} points in {draws} prior draws"
            )
        theta = model.sample_prior(batch, generator)
        ll = log_lik(theta)
        draws += batch
        report.evaluations += batch
        keep = ll > threshold
        points.append(theta[keep])
        values.append(ll[keep])
        found += int(keep.sum())
    report.accepted += count
    report.proposed += draws
    return torch.cat(points)[:count], torch.cat(values)[:count]
