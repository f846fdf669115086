"""Importance sampling from a Laplace proposal: the large-N reference for log Z.

For large N the posterior is close to Gaussian around its mode (Bernstein–von Mises), so a
multivariate Student-t centred at the posterior mode θ̂ with scale² · H⁻¹ (H = −∇² log p(θ̂ | y))
is a proposal q whose importance weights w = p(θ) p(y | θ) / q(θ) vary little, and
Ẑ = mean_s w_s is unbiased for p(y) whatever the proposal's quality (the quality shows in the
standard error and the Pareto k̂ of the weights; Vehtari et al. 2024, PSIS, sec. 3).

Mixture posteriors have K! relabelled copies of every mode; q is the equal mixture of the
Student-t over all of them (``Model.relabelings``), so Ẑ counts every copy without assuming they
are separated (Frühwirth-Schnatter 2004, permutation-augmented proposals).

The mode: damped Newton (Levenberg–Marquardt) on the full-data log posterior from the particles
of a pilot AIS run on a subsample, the Hessian by central differences of the exact gradient (one
batched pass of 2D particles), stopped when the Newton decrement λ²/2 — the log-density the next
step would gain — is below ``tolerance`` nats. Cost: O(N) per Newton step and per draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from pydantic import Field
from scipy import stats
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.references.ais import AISSettings, run_ais
from modelcompare.estimators.references.batch import (
    BatchEvidence,
    checked,
    full_log_likelihood,
    full_log_likelihood_and_grad,
)
from modelcompare.estimators.settings import Settings
from modelcompare.estimators.smc.weights import ess, log_mean_increment, log_normalize
from modelcompare.models import Model
from modelcompare.models.gamma_poisson import sample_log_gamma


class LaplaceISSettings(Settings):
    """``run_laplace_is``'s settings (a library function, not a streaming method)."""

    draws: int = Field(
        4096, ge=2, le=1_000_000, description="proposal draws, one full-data evaluation each"
    )
    dof: float = Field(
        10.0, gt=0.0, le=1000.0, description="Student-t degrees of freedom of the proposal"
    )
    scale: float = Field(
        1.2, gt=0.0, le=100.0, description="proposal scale relative to the Laplace covariance"
    )
    pilot_rows: int = Field(
        1000, ge=1, le=1_000_000, description="subsample of the pilot AIS run that starts Newton"
    )
    starts: int = Field(
        4,
        ge=1,
        le=100,
        description="posterior modes found by Newton from distinct pilot particles (best kept); "
        "a particle from which Newton fails gives way to the next",
    )
    max_newton_steps: int = Field(100, ge=1, le=10_000, description="Newton steps per start")
    tolerance: float = Field(
        1e-6, gt=0.0, le=1.0, description="Newton decrement (nats) at which the mode is found"
    )
    max_relabelings: int = Field(
        5040, ge=1, le=40_320, description="proposal components (K! for a mixture); more raise"
    )


@dataclass(frozen=True)
class Mode:
    location: Tensor  # (D,) θ̂
    precision: Tensor  # (D, D) H = −∇² log p(θ̂ | y), symmetric positive definite
    log_density: float  # log p(θ̂) + log p(y | θ̂)
    newton_steps: int

    def covariance_factor(self) -> Tensor:
        """L, lower triangular, with L Lᵀ = H⁻¹ (the Laplace covariance)."""
        return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(self.precision)))


@dataclass(frozen=True)
class LaplaceISResult:
    evidence: BatchEvidence
    mode: Mode
    ess: float  # Kish effective sample size of the importance weights
    pareto_k: float  # tail index of the weights: < 0.7 means the stderr can be trusted


def log_posterior_and_grad(model: Model, theta: Tensor, rows: Rows) -> tuple[Tensor, Tensor]:
    value, grad = full_log_likelihood_and_grad(model, theta, rows)
    return value + model.log_prior(theta), grad + model.grad_log_prior(theta)


def hessian(model: Model, theta: Tensor, rows: Rows, step: float = 1e-5) -> Tensor:
    """∇² log p(θ | y) at θ (D,) by central differences of the exact gradient, symmetrised."""
    d = theta.shape[0]
    offsets = step * torch.eye(d, dtype=theta.dtype, device=theta.device)
    _, grads = log_posterior_and_grad(model, torch.cat([theta + offsets, theta - offsets]), rows)
    columns = (grads[:d] - grads[d:]) / (2.0 * step)
    return 0.5 * (columns + columns.T)


def find_mode(model: Model, rows: Rows, start: Tensor, config: LaplaceISSettings) -> Mode:
    """Levenberg–Marquardt ascent of log p(θ | y) from ``start`` (D,) (Nocedal & Wright §10.3)."""
    theta, damping = start, 0.0
    value, grad = (t[0] for t in log_posterior_and_grad(model, theta[None], rows))
    for steps in range(1, config.max_newton_steps + 1):
        precision = -hessian(model, theta, rows)
        while True:
            scaled = precision + damping * precision.diagonal().abs().clamp_min(1.0).diag()
            factor, info = torch.linalg.cholesky_ex(scaled)
            if int(info) == 0:
                break
            damping = max(10.0 * damping, 1e-6)
        direction = torch.cholesky_solve(grad[:, None], factor)[:, 0]
        decrement = 0.5 * float(grad @ direction)
        if damping == 0.0 and decrement < config.tolerance:
            return Mode(theta, precision, float(value), steps)
        new_value, new_grad = (
            t[0] for t in log_posterior_and_grad(model, (theta + direction)[None], rows)
        )
        if torch.isfinite(new_value) and new_value >= value:
            theta, value, grad = theta + direction, new_value, new_grad
            damping = 0.0 if damping < 1e-6 else damping / 10.0
        else:
            damping = max(10.0 * damping, 1e-6)
        if damping > 1e12:
            break
    raise EstimatorError(f"Newton did not find the posterior mode in {steps} steps")


class StudentTProposal:
    """Equal mixture over the model's relabelings of a multivariate t at the mode."""

    def __init__(self, model: Model, mode: Mode, config: LaplaceISSettings) -> None:
        self.model, self.location, self.dof = model, mode.location, config.dof
        self.factor = config.scale * mode.covariance_factor()  # Σ = L Lᵀ
        self.relabelings = model.relabelings(mode.location[None]).shape[0]

    def sample(self, num: int, generator: torch.Generator) -> Tensor:
        d = self.location.shape[0]
        device = self.location.device
        normal = torch.randn(num, d, generator=generator, dtype=self.location.dtype, device=device)
        chi2 = 2.0 * torch.exp(sample_log_gamma(self.dof / 2.0, num, generator))
        draws = self.location + (normal @ self.factor.T) * torch.sqrt(self.dof / chi2)[:, None]
        copy = torch.randint(0, self.relabelings, (num,), generator=generator, device=device)
        return self.model.relabelings(draws)[copy, torch.arange(num, device=device)]

    def log_density(self, theta: Tensor) -> Tensor:
        d, nu = self.location.shape[0], self.dof
        # Whitened distance of every relabeled θ; the set of relabelings is a group, so
        # q(θ) = mean_g t(T_g θ) is the mixture over the relabeled modes.
        centred = self.model.relabelings(theta) - self.location
        white = torch.linalg.solve_triangular(
            self.factor, centred.reshape(-1, d).T, upper=False
        ).T.reshape(centred.shape)
        log_t = (
            math.lgamma((nu + d) / 2.0)
            - math.lgamma(nu / 2.0)
            - 0.5 * d * math.log(nu * math.pi)
            - float(self.factor.diagonal().log().sum())
            - 0.5 * (nu + d) * torch.log1p((white**2).sum(-1) / nu)
        )
        return torch.logsumexp(log_t, dim=0) - math.log(self.relabelings)


def pareto_k(log_weights: Tensor) -> float:
    """Generalized-Pareto shape of the largest weights, M = min(S/5, 3√S) of them (PSIS §3)."""
    s = log_weights.shape[0]
    tail = int(min(s / 5, 3 * math.sqrt(s)))
    ordered = torch.sort(log_weights).values
    threshold = ordered[-tail - 1]
    excess = torch.exp(ordered[-tail:] - threshold) - 1.0
    shape, _, _ = stats.genpareto.fit(excess.numpy(), floc=0.0)
    return float(shape)


def run_laplace_is(
    model: Model, rows: Rows, config: LaplaceISSettings, generator: torch.Generator
) -> LaplaceISResult:
    """log p(rows) by importance sampling from the relabeled Student-t at the posterior mode."""
    copies = model.relabelings(torch.zeros(1, model.param_dim, dtype=torch.float64)).shape[0]
    if copies > config.max_relabelings:
        raise EstimatorError(
            f"the proposal would need {copies} relabeled components "
            f"(max_relabelings {config.max_relabelings})"
        )
    count = rows.count
    spread = torch.linspace(0, count - 1, min(config.pilot_rows, count), device=rows.device)
    pilot_rows = rows.take(spread.long())
    pilot = run_ais(model, pilot_rows, AISSettings(device=config.device), generator)
    order = torch.randperm(pilot.particles.shape[0], generator=generator, device=generator.device)
    starts = pilot.particles[order]
    modes: list[Mode] = []
    for start in starts:  # a start where Newton fails gives way to the next pilot particle
        try:
            modes.append(find_mode(model, rows, start, config))
        except EstimatorError:
            continue
        if len(modes) == config.starts:
            break
    if not modes:
        raise EstimatorError("Newton found no posterior mode from any pilot particle")
    mode = max(modes, key=lambda found: found.log_density)
    proposal = StudentTProposal(model, mode, config)
    draws = proposal.sample(config.draws, generator)
    log_target = checked(full_log_likelihood(model, draws, rows)) + model.log_prior(draws)
    log_weights = torch.nan_to_num(log_target - proposal.log_density(draws), nan=-math.inf)
    uniform = torch.full_like(log_weights, -math.log(config.draws))
    log_evidence, variance = log_mean_increment(uniform, log_weights)
    normalized = log_normalize(log_weights)
    newton = sum(found.newton_steps for found in modes)
    d = model.param_dim
    # The pilot read pilot_rows.count rows per evaluation: counted in full-data equivalents.
    pilot_evaluations = round(pilot.likelihood_evaluations * pilot_rows.count / count)
    evidence = BatchEvidence(
        log_evidence=log_evidence,
        log_evidence_stderr=math.sqrt(variance),
        iterations=newton,
        # pilot, per Newton step 2D Hessian gradients and one trial point, the draws
        likelihood_evaluations=pilot_evaluations + newton * (2 * d + 1) + config.draws,
        particles=draws,
        log_weights=normalized,
    )
    return LaplaceISResult(evidence, mode, ess(normalized), pareto_k(log_weights))
