"""Mean-field VI for the Gaussian mixture (``GaussianMixture``), for MC-CAVI (``mean_field``).

Model (ρ = 1/σ²): π ~ Dir(1_K), ρ_kj ~ Gamma(1, 1), μ_kj | ρ_kj ~ N(0, 1/(κ₀ρ_kj)) with κ₀ = 1/4,
z_i ~ Cat(π), x_ij | z_i = k ~ N(μ_kj, 1/ρ_kj). Mean field q(z) q(π) q(μ, ρ) (Bishop, PRML §10.2):

- q(z_i) = Cat(r_i), log r_ik = E[log π_k] + Σ_j ½E[log ρ_kj] − ½log 2π − ½E[ρ_kj (x_ij − μ_kj)²];
- q(π) = Dir(1 + N_k), N_k = Σ_i r_ik;
- q(μ_kj, ρ_kj) = NormalGamma(m, κ, a, b) with κ = κ₀ + N_k, m = S1/κ, a = 1 + N_k/2,
  b = 1 + (S2 − S1²/κ)/2, S1 = Σ_i r_ik x_ij, S2 = Σ_i r_ik x_ij².

MC-CAVI estimates the expectations in the r-update (E[log π], E[log ρ], E[ρ], E[ρμ], E[ρμ²])
from chains on q(π) q(μ, ρ) over (ALR logits of π, μ, log ρ); the monitored expectation is the
mixing fractions N_k / n. The ELBO at
the final (r, q) is exact: Σ_i E[log p(x_i, z_i | θ)] + H[q(z)] − KL(q(π)‖p(π)) − KL(q(μ,ρ)‖p).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.models.mean_field import Sampler, resize_chains
from modelcompare.models.mixture_prior import MEAN_VARIANCE_RATIO, VARIANCE_SCALE, VARIANCE_SHAPE

KAPPA0 = 1.0 / MEAN_VARIANCE_RATIO
LOG_2PI = math.log(2.0 * math.pi)


class MixtureQ(NamedTuple):
    """Global factors: Dirichlet ``alpha`` (K,) and NormalGamma ``m, kappa, a, b`` (K, d)."""

    alpha: Tensor
    m: Tensor
    kappa: Tensor
    a: Tensor
    b: Tensor


class Expectations(NamedTuple):
    log_pi: Tensor  # (K,)
    log_rho: Tensor  # (K, d)
    rho: Tensor
    rho_mu: Tensor
    rho_mu2: Tensor


def global_factors(x: Tensor, r: Tensor) -> MixtureQ:
    counts = r.sum(0)
    s1, s2 = r.T @ x, r.T @ x**2
    kappa = (KAPPA0 + counts)[:, None].expand_as(s1)
    a = (VARIANCE_SHAPE + 0.5 * counts)[:, None].expand_as(s1)
    b = VARIANCE_SCALE + 0.5 * (s2 - s1**2 / kappa)
    return MixtureQ(1.0 + counts, s1 / kappa, kappa, a, b)


def responsibilities(x: Tensor, e: Expectations) -> Tensor:
    quad = x**2 @ e.rho.T - 2.0 * x @ e.rho_mu.T + e.rho_mu2.sum(-1)  # (n, K)
    log_r = e.log_pi + 0.5 * (e.log_rho.sum(-1) - x.shape[1] * LOG_2PI) - 0.5 * quad
    return torch.softmax(log_r, 1)


class MixtureTarget:
    """log q(π) q(μ, ρ) per chain over y = (z (K−1), μ (K·d), u = log ρ (K·d)), and the Laplace
    standard deviations at its mode (HMC's diagonal preconditioner)."""

    def __init__(self, q: MixtureQ) -> None:
        self.q = q
        self.k, self.d = q.m.shape

    def split(self, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c, k, d = y.shape[0], self.k, self.d
        logits = torch.cat([y[:, : k - 1], y.new_zeros(c, 1)], 1)
        means = y[:, k - 1 : k - 1 + k * d].reshape(c, k, d)
        log_rho = y[:, k - 1 + k * d :].reshape(c, k, d)
        return torch.log_softmax(logits, 1), means, log_rho

    def __call__(self, y: Tensor) -> tuple[Tensor, Tensor]:
        q = self.q
        log_pi, mu, u = self.split(y)
        # Dir(α) on π in ALR coordinates (Jacobian Π π_k): Σ α_k log π_k; ∂/∂z_j = α_j − A π_j.
        log_dir = log_pi @ q.alpha
        grad_z = (q.alpha - q.alpha.sum() * torch.exp(log_pi))[:, : self.k - 1]
        # NormalGamma on (μ, u = log ρ), Jacobian ρ: (a + ½)u − b e^u − ½κ e^u (μ − m)².
        rho, diff = torch.exp(u), mu - q.m
        log_ng = (q.a + 0.5) * u - q.b * rho - 0.5 * q.kappa * rho * diff**2
        grad_mu = -q.kappa * rho * diff
        grad_u = q.a + 0.5 - q.b * rho - 0.5 * q.kappa * rho * diff**2
        c = y.shape[0]
        grad = torch.cat([grad_z, grad_mu.reshape(c, -1), grad_u.reshape(c, -1)], 1)
        return log_dir + log_ng.sum((1, 2)), grad

    def mode_and_scale(self) -> tuple[Tensor, Tensor]:
        q = self.q
        pi = q.alpha / q.alpha.sum()
        rho = (q.a + 0.5) / q.b
        mode = torch.cat([torch.log(pi[:-1] / pi[-1]), q.m.reshape(-1), torch.log(rho).reshape(-1)])
        sd = torch.cat(
            [
                1.0 / torch.sqrt(q.alpha.sum() * pi * (1.0 - pi))[:-1],
                (1.0 / torch.sqrt(q.kappa * rho)).reshape(-1),
                (1.0 / torch.sqrt(q.a + 0.5)).reshape(-1),
            ]
        )
        return mode, sd


def monte_carlo_expectations(target: MixtureTarget, draws: Tensor) -> Expectations:
    log_pi, mu, u = target.split(draws)
    rho = torch.exp(u)
    return Expectations(
        log_pi.mean(0), u.mean(0), rho.mean(0), (rho * mu).mean(0), (rho * mu**2).mean(0)
    )


def exact_expectations(q: MixtureQ) -> Expectations:
    e_rho = q.a / q.b
    return Expectations(
        torch.digamma(q.alpha) - torch.digamma(q.alpha.sum()),
        torch.digamma(q.a) - torch.log(q.b),
        e_rho,
        e_rho * q.m,
        1.0 / q.kappa + e_rho * q.m**2,
    )


def kl_dirichlet(alpha: Tensor, prior: Tensor) -> Tensor:
    total = alpha.sum()
    return (
        torch.lgamma(total)
        - torch.lgamma(alpha).sum()
        - torch.lgamma(prior.sum())
        + torch.lgamma(prior).sum()
        + ((alpha - prior) * (torch.digamma(alpha) - torch.digamma(total))).sum()
    )


def kl_normal_gamma(q: MixtureQ) -> Tensor:
    """KL(NG(m, κ, a, b) ‖ NG(0, κ₀, a₀, b₀)) = KL of the Gamma parts + E_ρ KL of the normals."""
    a0, b0 = VARIANCE_SHAPE, VARIANCE_SCALE
    gamma = (
        (q.a - a0) * torch.digamma(q.a)
        - torch.lgamma(q.a)
        + math.lgamma(a0)
        + a0 * (torch.log(q.b) - math.log(b0))
        + q.a * (b0 - q.b) / q.b
    )
    ratio = KAPPA0 / q.kappa
    normal = 0.5 * (ratio + KAPPA0 * q.m**2 * q.a / q.b - 1.0 - torch.log(ratio))
    return (gamma + normal).sum()


def mixture_elbo(x: Tensor, r: Tensor, q: MixtureQ) -> float:
    e = exact_expectations(q)
    quad = x**2 @ e.rho.T - 2.0 * x @ e.rho_mu.T + e.rho_mu2.sum(-1)
    log_joint = e.log_pi + 0.5 * (e.log_rho.sum(-1) - x.shape[1] * LOG_2PI) - 0.5 * quad
    expected = (r * log_joint).sum() - torch.special.xlogy(r, r).sum()
    prior_alpha = torch.ones_like(q.alpha)
    return float(expected - kl_dirichlet(q.alpha, prior_alpha) - kl_normal_gamma(q))


def initial_responsibilities(x: Tensor, components: int, generator: torch.Generator) -> Tensor:
    """Soft assignment to K distinct rows drawn at random, in units of the data's spread."""
    order = torch.randperm(x.shape[0], generator=generator, device=generator.device)
    centres = x[order[:components].to(x.device)]
    if centres.shape[0] < components:  # fewer rows than components: reuse rows
        centres = centres[torch.arange(components, device=x.device) % centres.shape[0]]
    spread = (
        x.var(0) + 1e-12
        if x.shape[0] > 1
        else torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
    )
    distance = (((x[:, None, :] - centres[None]) ** 2) / spread).sum(-1)
    return torch.softmax(-0.5 * distance * components**2, 1)


class MixtureState(NamedTuple):
    x: Tensor  # (n, d) the rows
    r: Tensor  # (n, K) responsibilities q(z)
    q: MixtureQ  # global factors
    chains: Tensor  # (C, P) on q(π) q(μ, ρ)


class MixtureMeanField:
    """``MeanField`` of ``GaussianMixture(dim, components)``."""

    def __init__(self, components: int) -> None:
        self.components = components

    def start(
        self, x: Tensor | None, y: Tensor | None, draws: int, generator: torch.Generator
    ) -> MixtureState:
        assert x is not None
        r = initial_responsibilities(x, self.components, generator)
        q = global_factors(x, r)
        chains = MixtureTarget(q).mode_and_scale()[0].expand(draws, -1).clone()
        return MixtureState(x, r, q, chains)

    def sweep(self, state: MixtureState, sample: Sampler) -> tuple[MixtureState, float, float]:
        x, r = state.x, state.r
        target = MixtureTarget(state.q)
        _, sd = target.mode_and_scale()
        chains = sample(state.chains, target, torch.diag(sd))
        new_r = responsibilities(x, monte_carlo_expectations(target, chains))
        # Change of the mixing fractions N_k / n. A shift δ of log r_ik moves r_ik by at most δ/4,
        # so the Monte Carlo error of the fractions is judged by that of E[log π_k], a heuristic.
        change = float((new_r.sum(0) - r.sum(0)).abs().max()) / x.shape[0]
        log_pi = target.split(chains)[0]
        noise = float(log_pi.std(0).max()) / math.sqrt(chains.shape[0]) / 4.0
        return MixtureState(x, new_r, global_factors(x, new_r), chains), change, noise

    def resize(self, state: MixtureState, draws: int) -> MixtureState:
        return state._replace(chains=resize_chains(state.chains, draws))

    def elbo(self, state: MixtureState) -> float:
        return mixture_elbo(state.x, state.r, state.q)

    def cavi_elbo(
        self, x: Tensor | None, y: Tensor | None, generator: torch.Generator, iterations: int = 500
    ) -> float:
        """Plain CAVI (exact expectations) from the same initialisation: the reference ELBO."""
        assert x is not None
        r = initial_responsibilities(x, self.components, generator)
        for _ in range(iterations):
            r = responsibilities(x, exact_expectations(global_factors(x, r)))
        return mixture_elbo(x, r, global_factors(x, r))
