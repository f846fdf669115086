"""The Gaussian start: a stream's first piece annealed in from the Laplace approximation of its
posterior instead of from the prior (docs/design/gaussian-start.md).

From the prior, a stream's first rows move the particles farthest: the schedule cuts them into
pieces (20 rows, then n/4) and each piece's ladder is long, its steps growing with D (linear
regression with D = 161: 13 pieces and about 650 steps for the first 500 rows, a third of a
10,000-row run). Annealing instead along

    π_λ(θ) ∝ q(θ)^(1−λ) · (p(θ) p(piece | θ))^λ,   q = N(θ̂, H⁻¹),

θ̂ the mode of the piece's posterior and H = −∇² log p(θ | piece) there, is the same estimator
with another start (Neal 2001, AIS from any normalised π₀): every step's increment is
log Σ_i W_i (p(θ_i) p(piece | θ_i) / q(θ_i))^Δ, and as q is normalised they sum to log p(piece).
Its ladder is as long as q is far from the posterior: one step where the posterior is Gaussian.
The moves' mass is H⁻¹ throughout the piece, which M < D particles could not estimate.

Where Newton finds no mode (a posterior without one, a start outside the domain), the piece
anneals from the prior as before, cut by the schedule.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.deadline import Deadline, check_deadline
from modelcompare.estimators.errors import EstimatorError, Progress
from modelcompare.estimators.references.batch import full_log_likelihood
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, find_mode
from modelcompare.estimators.smc.mass import MassPool, MassRule
from modelcompare.models import Model

# Levenberg–Marquardt ascent to the mode: at most this many Newton steps, each of 2D + 1
# gradient passes over the piece, stopped when the next would gain less than 1e-6 nats
NEWTON = LaplaceISSettings(max_newton_steps=50)
# Newton's starts, tried in turn: the particles' mean, then the particles of highest posterior
# density. From some prior draws of Poisson regression (101 parameters, 500 rows) Newton stalls
# (its finite-difference Hessian is poor where the exp link is at e^10 and more); from their mean
# it converged on every data set tried.
STARTS = 4


class GaussianReference(NamedTuple):
    """q = N(mean, precision⁻¹), with ``factor`` L the Cholesky factor of its covariance."""

    mean: Tensor  # (D,) θ̂
    precision: Tensor  # (D, D) H
    factor: Tensor  # (D, D) lower, L Lᵀ = H⁻¹

    def log_density(self, theta: Tensor) -> Tensor:
        """log q(θ) (M,) for θ (M, D)."""
        centred = theta - self.mean.to(theta.dtype)
        distance = ((centred @ self.precision.to(theta.dtype)) * centred).sum(-1)
        log_det = 2.0 * float(self.factor.diagonal().log().sum())  # log |H⁻¹|
        return -0.5 * (distance + log_det + self.mean.shape[0] * math.log(2.0 * math.pi))

    def grad_log_density(self, theta: Tensor) -> Tensor:
        """∇ log q(θ) = −H (θ − θ̂) (M, D)."""
        return -(theta - self.mean.to(theta.dtype)) @ self.precision.to(theta.dtype)

    def sample(self, count: int, generator: torch.Generator) -> Tensor:
        normal = torch.randn(count, self.mean.shape[0], generator=generator,
                             dtype=self.mean.dtype, device=self.mean.device)
        return self.mean + normal @ self.factor.T


class Bridge(NamedTuple):
    """The start's share (1 − λ) of the exact tempered target's base: log p(θ) becomes
    λ log p(θ) + (1 − λ) log q(θ) (the likelihood's λ is the target's own)."""

    reference: GaussianReference
    weight: float  # 1 − λ

    def value_and_grad(
        self, theta: Tensor, log_prior: Tensor, grad: Tensor
    ) -> tuple[Tensor, Tensor]:
        if self.weight == 1.0:  # λ = 0: q alone, even where the prior is −∞
            return self.reference.log_density(theta), self.grad(theta, grad)
        stay = 1.0 - self.weight
        return (stay * log_prior + self.weight * self.reference.log_density(theta),
                self.grad(theta, grad))

    def grad(self, theta: Tensor, grad_log_prior: Tensor) -> Tensor:
        if self.weight == 1.0:  # λ = 0: q's alone, as the value
            return self.reference.grad_log_density(theta)
        return (1.0 - self.weight) * grad_log_prior + self.weight * self.reference.grad_log_density(
            theta)


def laplace_reference(
    model: Model, rows: Rows, particles: Tensor, deadline: Deadline | None = None
) -> GaussianReference | None:
    """q at the mode of p(θ | ``rows``), Newton started from the particles (prior draws) in
    turn (``STARTS``), ``deadline`` checked before each start; None where it finds none."""
    log_posterior = full_log_likelihood(model, particles, rows) + model.log_prior(particles)
    order = torch.argsort(torch.nan_to_num(log_posterior, nan=-math.inf), descending=True)
    starts = torch.cat([particles.mean(0, keepdim=True), particles[order[: STARTS - 1]]])
    for start in starts:
        check_deadline(deadline, Progress(0, 0.0, 0))
        try:
            mode = find_mode(model, rows, start, NEWTON)
            return GaussianReference(mode.location, mode.precision, mode.covariance_factor())
        except (EstimatorError, torch.linalg.LinAlgError):
            continue
    return None


def reference_mass(reference: GaussianReference) -> MassRule:
    """The moves' mass factor: q's covariance at every step; the pool passes through."""

    def rule(theta: Tensor, log_weights: Tensor, pool: MassPool) -> tuple[Tensor, MassPool]:
        return reference.factor.to(theta.dtype), pool

    return rule
