"""Mean-field VI for linear regression with unknown noise (``LinearRegressionUnknownNoise``).

q(β) q(ρ) with ρ = 1/σ². Writing A = ΦᵀΦ + I/τ² and h = Φᵀy (the conjugate statistics with unit
noise, ``gaussian_linear``) and Q(β) = |y − Φβ|² + |β|²/τ² = yᵀy − 2hᵀβ + βᵀAβ, CAVI gives

    q(β) = N(m, (E[ρ] A)⁻¹),  m = A⁻¹h;     q(ρ) = Gamma(a₀ + (n + p)/2, b₀ + E_q(β)[Q(β)]/2).

MC-CAVI estimates E_q(β)[Q(β)] from chains on q(β) and E[ρ] from chains on q(log ρ); the monitored
expectation is E[ρ]. The normal model y ~ N(μ, σ²) with unknown mean and precision is the case of
no inputs (x with zero columns: Φ = 1, an intercept alone).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.models.gaussian_linear import (
    GaussianPosterior,
    add_rows,
    prior_information,
    regression_inputs,
)
from modelcompare.models.mean_field import LogDensity, Sampler, resize_chains

LOG_2PI = math.log(2.0 * math.pi)


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


class NIGData(NamedTuple):
    """What the rows fix: A, h, yᵀy and n (as ``gaussian_linear`` statistics), q(ρ)'s shape a_N,
    q(β)'s mean m = A⁻¹h and the factor L with L Lᵀ = A⁻¹."""

    stats: dict[str, Tensor]
    shape: Tensor
    mean: Tensor
    scale: Tensor


class NIGState(NamedTuple):
    data: NIGData
    beta: Tensor  # (C, p) chains on q(β)
    log_rho: Tensor  # (C, 1) chains on q(log ρ)
    rho_mean: float  # E_q[ρ]
    rate: float  # q(ρ)'s rate


class NIGMeanField:
    """``MeanField`` of ``LinearRegressionUnknownNoise(prior_std, noise_shape, noise_scale)``."""

    def __init__(self, dim: int, prior_std: float, noise_shape: float, noise_scale: float) -> None:
        self.dim = dim
        self.prior_std = prior_std
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale

    def data(self, x: Tensor | None, y: Tensor | None) -> NIGData:
        assert y is not None
        x = regression_inputs(self.dim, x, y)
        prior = prior_information(self.dim + 1, self.prior_std)
        stats = add_rows({k: v.to(y.device) for k, v in prior.items()}, x, y)
        posterior = GaussianPosterior.of(stats)
        p, n = posterior.shift.shape[0], int(stats["count"])
        shape = torch.tensor(self.noise_shape + 0.5 * (n + p), dtype=y.dtype, device=y.device)
        return NIGData(stats, shape, posterior.mean(), torch.linalg.inv(posterior.chol).T)

    def start(
        self, x: Tensor | None, y: Tensor | None, draws: int, generator: torch.Generator
    ) -> NIGState:
        data = self.data(x, y)
        rate = self._rate(data.stats["sum_y2"] - data.stats["shift"] @ data.mean)
        rho_mean = float(data.shape) / rate
        p = data.mean.shape[0]
        log_rho = torch.full(
            (draws, 1), math.log(rho_mean), dtype=data.mean.dtype, device=data.mean.device
        )
        return NIGState(data, data.mean.expand(draws, p).clone(), log_rho, rho_mean, rate)

    def _rate(self, expected_q: Tensor) -> float:
        """q(ρ)'s rate b₀ + E[Q(β)]/2."""
        return float(self.noise_scale + 0.5 * expected_q)

    def sweep(self, state: NIGState, sample: Sampler) -> tuple[NIGState, float, float]:
        data, a_matrix = state.data, state.data.stats["precision"]
        # q(β) = N(m, (E[ρ]A)⁻¹); E_q(β)[Q(β)] by MCMC, Q(β) = yᵀy − 2hᵀβ + βᵀAβ.
        target = gaussian_target(data.mean, state.rho_mean * a_matrix)
        beta = sample(state.beta, target, data.scale / math.sqrt(state.rho_mean))
        expected_q = (
            data.stats["sum_y2"]
            - 2.0 * beta @ data.stats["shift"]
            + ((beta @ a_matrix) * beta).sum(-1)
        ).mean()
        rate = self._rate(expected_q)
        # q(ρ) = Gamma(a₀ + (n+p)/2, b₀ + E[Q]/2); E_q(ρ)[ρ] by MCMC on log ρ.
        scale = torch.full(
            (1, 1), 1.0 / math.sqrt(float(data.shape)), dtype=beta.dtype, device=beta.device
        )
        rate_t = torch.tensor(rate, dtype=beta.dtype, device=beta.device)
        log_rho = sample(state.log_rho, log_gamma_target(data.shape, rate_t), scale)
        rho = torch.exp(log_rho)
        rho_mean = float(rho.mean())
        change = abs(rho_mean - state.rho_mean) / state.rho_mean
        noise = float(rho.std()) / math.sqrt(rho.shape[0]) / rho_mean  # relative MC error
        return NIGState(data, beta, log_rho, rho_mean, rate), change, noise

    def resize(self, state: NIGState, draws: int) -> NIGState:
        return state._replace(
            beta=resize_chains(state.beta, draws), log_rho=resize_chains(state.log_rho, draws)
        )

    def elbo(self, state: NIGState) -> float:
        return self._elbo(state.data, state.rho_mean, state.rate)

    def cavi_elbo(self, x: Tensor | None, y: Tensor | None, generator: torch.Generator) -> float:
        """The exact fixed point: E[ρ] = a_N/b_N with b_N = b₀ + (Q(m) + p/E[ρ])/2, so
        b_N = (b₀ + Q(m)/2) / (1 − p/(2a_N))."""
        data = self.data(x, y)
        p, shape = data.mean.shape[0], float(data.shape)
        residual = data.stats["sum_y2"] - data.stats["shift"] @ data.mean
        rate = self._rate(residual) / (1.0 - p / (2.0 * shape))
        return self._elbo(data, shape / rate, rate)

    def _elbo(self, data: NIGData, rho_mean: float, rate: float) -> float:
        """ELBO at q(β) = N(m, (E[ρ]A)⁻¹), q(ρ) = Gamma(a_N, rate) (all closed form).

        log p(y, β, ρ) = ((n+p)/2 + a₀ − 1) log ρ − ρ(Q(β)/2 + b₀) + const.
        """
        a0, b0, tau = self.noise_shape, self.noise_scale, self.prior_std
        stats = data.stats
        p, n = data.mean.shape[0], int(stats["count"])
        rate_t = torch.tensor(rate, dtype=data.mean.dtype, device=data.mean.device)
        expected_q = stats["sum_y2"] - stats["shift"] @ data.mean + p / rho_mean  # tr(AS) = p/E[ρ]
        e_rho = data.shape / rate_t
        e_log_rho = torch.digamma(data.shape) - torch.log(rate_t)
        log_det_a = GaussianPosterior.of(stats).log_det()
        expected_log_joint = (
            (0.5 * (n + p) + a0 - 1.0) * e_log_rho
            - e_rho * (0.5 * expected_q + b0)
            - 0.5 * n * LOG_2PI
            - 0.5 * p * (LOG_2PI + 2.0 * math.log(tau))
            + a0 * math.log(b0)
            - math.lgamma(a0)
        )
        entropy_beta = 0.5 * p * (1.0 + LOG_2PI) - 0.5 * (log_det_a + p * math.log(rho_mean))
        return float(expected_log_joint + entropy_beta + gamma_entropy(data.shape, rate_t))
