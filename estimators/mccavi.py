"""MC-CAVI: coordinate-ascent variational inference with Monte Carlo expectations.

Ye, Beskos, De Iorio & Hao (2020), "Monte Carlo co-ordinate ascent variational inference". CAVI
sets each factor to q_j ∝ exp(E_{q_−j}[log p(data, θ)]) in turn (Bishop, PRML eq. 10.9); the
expectations E_{q_j}[f(θ_j)] that the other factors' updates need are estimated by short MCMC runs
on q_j (Metropolis-corrected HMC, chains warm-started from the previous iteration), and the Monte
Carlo size (number of chains) doubles each time the iterates stabilise (change within the
tolerance or within Monte Carlo error), up to ``max_draws``.

The ELBO is then evaluated in closed form at the final q. Any q gives a lower bound on log Z, so
Monte Carlo noise in the updates can only make the bound looser, never invalid.

This module: the MCMC expectation step and the normal / NIG regression model with unknown noise,
mean-field q(β) q(ρ), ρ = 1/σ² (``mccavi_mixture`` has the Gaussian mixture). For both families
every expectation happens to have a closed form as well; ``closed_form_*`` functions give the
exact CAVI fixed point the tests compare with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from estimators.base import check_int, check_number
from estimators.hmc import hmc_move
from models import LinearRegressionUnknownNoise
from models.linear_regression import design

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class MCCAVIConfig:
    initial_draws: int = 16  # MCMC chains (Monte Carlo size) at the first iteration
    max_draws: int = 512  # the Monte Carlo size stops doubling here
    transitions: int = 3  # HMC transitions per factor per iteration (warm-started chains)
    leapfrog_steps: int = 8
    step_size: float = 0.5  # leapfrog step in units of the factor's Laplace standard deviation
    tolerance: float = 1e-3  # relative change under which the iterates count as stable
    max_iterations: int = 200

    def __post_init__(self) -> None:
        check_int("initial_draws", self.initial_draws, 2)
        check_int("max_draws", self.max_draws, self.initial_draws)
        check_int("transitions", self.transitions, 1)
        check_int("leapfrog_steps", self.leapfrog_steps, 1)
        check_number("step_size", self.step_size, 0.0, 2.0)
        check_number("tolerance", self.tolerance, 0.0, 1.0)
        check_int("max_iterations", self.max_iterations, 1)


class MCCAVIResult(NamedTuple):
    elbo: float  # the evidence lower bound at the final q (closed form)
    iterations: int
    draws: int  # Monte Carlo size (chains) at the last iteration
    converged: bool  # stable at the largest Monte Carlo size before max_iterations
    acceptance_rate: float  # mean HMC acceptance over the run


LogDensity = Callable[[Tensor], tuple[Tensor, Tensor]]


def run_chains(position: Tensor, log_q: LogDensity, scale: Tensor, config: MCCAVIConfig,
               generator: torch.Generator) -> tuple[Tensor, float]:
    """``config.transitions`` HMC transitions of warm-started chains (one per draw) targeting
    the factor ``log_q``: the new draws and their mean acceptance rate."""
    rates = []
    for _ in range(config.transitions):
        position, rate = hmc_move(position, log_q, scale, config.step_size,
                                  config.leapfrog_steps, generator)
        rates.append(rate)
    return position, sum(rates) / len(rates)


def resize(position: Tensor, draws: int) -> Tensor:
    """More chains by duplicating the current ones (the next transitions separate them)."""
    return position.repeat(math.ceil(draws / position.shape[0]), 1)[:draws]


def next_draw_size(draws: int, change: float, noise: float,
                   config: MCCAVIConfig) -> tuple[int, bool]:
    """(Monte Carlo size, converged) after an iteration whose monitored expectation moved by the
    relative ``change``, with relative Monte Carlo standard error ``noise``. Stable means a change
    within max(tolerance, 2·noise): the size doubles then, and stability at ``max_draws`` ends
    the run."""
    if change >= max(config.tolerance, 2.0 * noise):
        return draws, False
    if draws >= config.max_draws:
        return draws, True
    return min(2 * draws, config.max_draws), False


def gamma_entropy(shape: Tensor, rate: Tensor) -> Tensor:
    return shape - torch.log(rate) + torch.lgamma(shape) + (1.0 - shape) * torch.digamma(shape)


def log_gamma_target(shape: Tensor, rate: Tensor) -> LogDensity:
    """Gamma(shape, rate) on u = log ρ (with the Jacobian ρ): shape·u − rate·e^u, per chain."""

    def log_q(u: Tensor) -> tuple[Tensor, Tensor]:
        e = torch.exp(u)
        return (shape * u - rate * e).sum(-1), shape - rate * e

    return log_q


def gaussian_target(mean: Tensor, precision: Tensor) -> LogDensity:
    def log_q(beta: Tensor) -> tuple[Tensor, Tensor]:
        grad = -(beta - mean) @ precision
        return 0.5 * (grad * (beta - mean)).sum(-1), grad

    return log_q


class RegressionStats(NamedTuple):
    """Everything mean-field VI needs from the data: A = ΦᵀΦ + I/τ², h = Φᵀy, yᵀy, n."""

    a_matrix: Tensor
    shift: Tensor
    sum_y2: Tensor
    count: int


def regression_stats(phi: Tensor, y: Tensor, prior_std: float) -> RegressionStats:
    eye = torch.eye(phi.shape[1], dtype=phi.dtype)
    return RegressionStats(phi.T @ phi + eye / prior_std**2, phi.T @ y, y @ y, y.shape[0])


def regression_elbo(model: LinearRegressionUnknownNoise, stats: RegressionStats,
                    rho_mean: float, rate: float) -> float:
    """ELBO at q(β) = N(m, (E[ρ]A)⁻¹), q(ρ) = Gamma(a_N, rate), m = A⁻¹h (all closed form).

    log p(y, β, ρ) = ((n+p)/2 + a₀ − 1) log ρ − ρ(Q(β)/2 + b₀) + const, Q(β) = |y − Φβ|² + |β|²/τ².
    """
    a0, b0, tau = model.noise_shape, model.noise_scale, model.prior_std
    p, n = stats.shift.shape[0], stats.count
    shape = torch.tensor(a0 + 0.5 * (n + p), dtype=torch.float64)
    rate_t = torch.tensor(rate, dtype=torch.float64)
    chol = torch.linalg.cholesky(stats.a_matrix)
    mean = torch.cholesky_solve(stats.shift[:, None], chol)[:, 0]
    expected_q = stats.sum_y2 - stats.shift @ mean + p / rho_mean  # tr(A S) = p / E[ρ]
    e_rho, e_log_rho = shape / rate_t, torch.digamma(shape) - torch.log(rate_t)
    log_det_a = 2.0 * torch.log(torch.diagonal(chol)).sum()
    expected_log_joint = (
        (0.5 * (n + p) + a0 - 1.0) * e_log_rho
        - e_rho * (0.5 * expected_q + b0)
        - 0.5 * n * LOG_2PI
        - 0.5 * p * (LOG_2PI + 2.0 * math.log(tau))
        + a0 * math.log(b0)
        - math.lgamma(a0)
    )
    entropy_beta = 0.5 * p * (1.0 + LOG_2PI) - 0.5 * (log_det_a + p * math.log(rho_mean))
    return float(expected_log_joint + entropy_beta + gamma_entropy(shape, rate_t))


def mccavi_regression(model: LinearRegressionUnknownNoise, x: Tensor, y: Tensor,
                      generator: torch.Generator,
                      config: MCCAVIConfig | None = None) -> MCCAVIResult:
    """MC-CAVI for NIG regression (θ = (w, b, σ²)); ``normal_design`` gives the normal model."""
    return mccavi_regression_stats(model, regression_stats(design(x), y, model.prior_std),
                                   generator, config)


def normal_design(rows: int) -> Tensor:
    """The normal model y ~ N(μ, σ²) with unknown mean and precision is NIG regression on the
    design Φ = 1 (an intercept alone): pass this to ``regression_stats``."""
    return torch.ones(rows, 1, dtype=torch.float64)


def mccavi_regression_stats(model: LinearRegressionUnknownNoise, stats: RegressionStats,
                            generator: torch.Generator,
                            config: MCCAVIConfig | None = None) -> MCCAVIResult:
    config = config or MCCAVIConfig()
    p, n = stats.shift.shape[0], stats.count
    shape = torch.tensor(model.noise_shape + 0.5 * (n + p), dtype=torch.float64)
    chol = torch.linalg.cholesky(stats.a_matrix)
    mean = torch.cholesky_solve(stats.shift[:, None], chol)[:, 0]
    scale_beta = torch.linalg.inv(chol).T  # L with L Lᵀ = A⁻¹: q(β)'s shape, up to 1/E[ρ]
    rate = float(model.noise_scale + 0.5 * (stats.sum_y2 - stats.shift @ mean))
    draws, converged, iterations, acceptance = config.initial_draws, False, 0, []
    beta = mean.expand(draws, p).clone()
    log_rho = torch.full((draws, 1), math.log(float(shape) / rate), dtype=torch.float64)
    rho_mean = float(shape) / rate
    while iterations < config.max_iterations and not converged:
        iterations += 1
        # q(β) = N(m, (E[ρ]A)⁻¹); E_q(β)[Q(β)] by MCMC, Q(β) = yᵀy − 2hᵀβ + βᵀAβ.
        beta, accepted = run_chains(beta, gaussian_target(mean, rho_mean * stats.a_matrix),
                                    scale_beta / math.sqrt(rho_mean), config, generator)
        acceptance.append(accepted)
        expected_q = (stats.sum_y2 - 2.0 * beta @ stats.shift
                      + ((beta @ stats.a_matrix) * beta).sum(-1)).mean()
        rate = float(model.noise_scale + 0.5 * expected_q)
        # q(ρ) = Gamma(a₀ + (n+p)/2, b₀ + E[Q]/2); E_q(ρ)[ρ] by MCMC on log ρ.
        scale_rho = torch.full((1, 1), 1.0 / math.sqrt(float(shape)), dtype=torch.float64)
        rate_t = torch.tensor(rate, dtype=torch.float64)
        log_rho, accepted = run_chains(log_rho, log_gamma_target(shape, rate_t), scale_rho,
                                       config, generator)
        acceptance.append(accepted)
        rho = torch.exp(log_rho)
        new_mean = float(rho.mean())
        change = abs(new_mean - rho_mean) / rho_mean
        noise = float(rho.std()) / math.sqrt(rho.shape[0]) / new_mean  # relative MC error
        rho_mean = new_mean
        draws, converged = next_draw_size(draws, change, noise, config)
        beta, log_rho = resize(beta, draws), resize(log_rho, draws)
    return MCCAVIResult(
        elbo=regression_elbo(model, stats, rho_mean, rate),
        iterations=iterations,
        draws=draws,
        converged=converged,
        acceptance_rate=sum(acceptance) / len(acceptance),
    )


def closed_form_regression_elbo(model: LinearRegressionUnknownNoise,
                                stats: RegressionStats) -> float:
    """The exact CAVI fixed point: E[ρ] = a_N/b_N with b_N = b₀ + (Q(m) + p/E[ρ])/2, so
    b_N = (b₀ + Q(m)/2) / (1 − p/(2a_N))."""
    p, n = stats.shift.shape[0], stats.count
    shape = model.noise_shape + 0.5 * (n + p)
    mean = torch.linalg.solve(stats.a_matrix, stats.shift)
    rate = float(model.noise_scale + 0.5 * (stats.sum_y2 - stats.shift @ mean)) / (
        1.0 - p / (2.0 * shape)
    )
    return regression_elbo(model, stats, shape / rate, rate)
