"""Bayesian Gaussian mixture density of the rows of x, diagonal covariances, K components.

Prior: π ~ Dirichlet(1, …, 1), σ²_kj ~ InvGamma(1, 1), μ_kj | σ²_kj ~ N(0, 4σ²_kj).

θ = (z, μ, s) in unconstrained space, D = (K − 1) + 2·K·dim:
- z ∈ R^(K−1) are additive log-ratio logits, π = softmax(z, 0) with the last logit fixed at 0;
- μ (K·dim) are the means, row-major (K, dim);
- s = log σ² (K·dim), row-major (K, dim).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from modelcompare.models.base import Model, Prediction
from modelcompare.models.config import MAX_COMPONENTS, FamilyConfig, Integer, input_dim
from modelcompare.models.gamma_poisson import sample_log_gamma
from modelcompare.models.mixture_mean_field import MixtureMeanField
from modelcompare.models.mixture_prior import MEAN_VARIANCE_RATIO, VARIANCE_SCALE, VARIANCE_SHAPE
from modelcompare.models.weighting import WeightedRows, joined_rows, weighted_log_mean_exp


class GaussianMixtureConfig(FamilyConfig):
    dim: Integer = input_dim()
    components: Integer = Field(
        ge=1,
        le=MAX_COMPONENTS,
        description=f"K: mixture components (at most {MAX_COMPONENTS}: the K! relabelings of the "
        "components are enumerated)",
    )


class GaussianMixture(Model):
    family: ClassVar[str] = "gaussian_mixture"
    Config: ClassVar[type[FamilyConfig]] = GaussianMixtureConfig

    def __init__(self, dim: int, components: int) -> None:
        config = GaussianMixtureConfig.checked(dim=dim, components=components)
        self.input_dim = config.dim
        self.components = config.components
        self.param_dim = (config.components - 1) + 2 * config.components * config.dim
        self.has_target = False

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "components": self.components}

    def _split(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(M, D) -> log π (M, K), μ (M, K, dim), s = log σ² (M, K, dim)."""
        m, k, d = theta.shape[0], self.components, self.input_dim
        logits = torch.cat([theta[:, : k - 1], theta.new_zeros(m, 1)], dim=1)
        means = theta[:, k - 1 : k - 1 + k * d].reshape(m, k, d)
        log_var = theta[:, k - 1 + k * d :].reshape(m, k, d)
        return torch.log_softmax(logits, dim=1), means, log_var

    def constrained(self, theta: Tensor) -> dict[str, Tensor]:
        """Interpretable parameters: weights (M, K), means and variances (M, K, dim)."""
        log_pi, means, log_var = self._split(theta)
        return {"weights": torch.exp(log_pi), "means": means, "variances": torch.exp(log_var)}

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        super().validate_data(x, y)
        assert x is not None
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{self.family} needs finite x")

    def log_prior(self, theta: Tensor) -> Tensor:
        log_pi, means, log_var = self._split(theta)
        k = self.components
        # Dirichlet(1) density Γ(K) times the ALR Jacobian |∂π_{<K}/∂z| = Π_{k≤K} π_k.
        weights = math.lgamma(k) + log_pi.sum(-1)
        # InvGamma(a, b) density at σ² = e^s times dσ²/ds = σ²: a log b − log Γ(a) − a s − b e^{−s}.
        a, b = VARIANCE_SHAPE, VARIANCE_SCALE
        variances = a * math.log(b) - math.lgamma(a) - a * log_var - b * torch.exp(-log_var)
        variances = variances.sum((1, 2))
        c = MEAN_VARIANCE_RATIO
        mean_terms = -0.5 * (
            means**2 * torch.exp(-log_var) / c + log_var + math.log(2 * math.pi * c)
        ).sum((1, 2))
        return weights + variances + mean_terms

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert x is not None
        return torch.logsumexp(self._joint(theta, x), dim=1)

    def _joint(self, theta: Tensor, x: Tensor) -> Tensor:
        """log π_k + log N(x_r | μ_k, diag σ²_k) per particle, component and row: (M, K, R)."""
        log_pi, means, log_var = self._split(theta)
        m, k, d = means.shape
        prec = torch.exp(-log_var)
        # Σ_j (x_j − μ_j)²/σ²_j = Σ_j x_j²/σ²_j − 2 x_j μ_j/σ²_j + μ_j²/σ²_j: one GEMM over (M·K).
        coefs = torch.cat([prec, -2.0 * means * prec], dim=-1).reshape(m * k, 2 * d)
        quad = (coefs @ torch.cat([x**2, x], dim=1).T).reshape(m, k, -1)
        quad = quad + (means**2 * prec).sum(-1, keepdim=True)
        log_norm = -0.5 * (log_var.sum(-1, keepdim=True) + d * math.log(2 * math.pi))
        return log_pi[:, :, None] + log_norm - 0.5 * quad

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        """∂/∂z_j Σ_k log π_k = 1 − K π_j; ∂/∂μ = −μ e^{−s}/c; ∂/∂s = −a + b e^{−s} +
        μ² e^{−s}/(2c) − 1/2 (the terms of ``log_prior``)."""
        log_pi, means, log_var = self._split(theta)
        k, c = self.components, MEAN_VARIANCE_RATIO
        prec = torch.exp(-log_var)
        d_logits = 1.0 - k * torch.exp(log_pi[:, : k - 1])
        d_means = -means * prec / c
        d_log_var = VARIANCE_SCALE * prec - VARIANCE_SHAPE + 0.5 * means**2 * prec / c - 0.5
        return torch.cat([d_logits, d_means.flatten(1), d_log_var.flatten(1)], dim=1)

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        return self.log_likelihood_and_grad(theta, x, y, row_weight)[1]

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        assert x is not None
        weights = torch.full((x.shape[0],), row_weight, dtype=x.dtype, device=x.device)
        return self._weighted_value_and_grad(theta, x, weights)

    def log_likelihood_and_grad_of_parts(
        self, theta: Tensor, parts: Sequence[WeightedRows]
    ) -> tuple[Tensor, Tensor]:
        """One pass over every part's rows, each row weighted by its part's weight."""
        x, _, weights = joined_rows(parts)
        assert x is not None
        return self._weighted_value_and_grad(theta, x, weights)

    def grad_log_likelihood_of_parts(self, theta: Tensor, parts: Sequence[WeightedRows]) -> Tensor:
        return self.log_likelihood_and_grad_of_parts(theta, parts)[1]

    def _weighted_value_and_grad(
        self, theta: Tensor, x: Tensor, weights: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Σ_r w_r log p(x_r | θ) (M,) and its gradient (M, D) in closed form: with the rows'
        weighted responsibilities ρ_kr, N_k = Σ_r ρ_kr, S1_k = Σ_r ρ_kr x_r, S2_k = Σ_r ρ_kr x_r²,
        ∂/∂z_j = N_j − π_j Σ_r w_r, ∂/∂μ_k = (S1_k − N_k μ_k) e^{−s_k} and
        ∂/∂s_k = −N_k/2 + e^{−s_k} (S2_k − 2 μ_k S1_k + μ_k² N_k)/2."""
        log_pi, means, log_var = self._split(theta)
        k = means.shape[1]
        prec = torch.exp(-log_var)
        joint = self._joint(theta, x)
        log_lik = torch.logsumexp(joint, dim=1)  # (M, R)
        resp = torch.exp(joint - log_lik[:, None, :]) * weights  # (M, K, R)
        count = resp.sum(-1)[..., None]  # (M, K, 1)
        first = resp @ x  # (M, K, d)
        second = resp @ x**2
        d_logits = count[:, : k - 1, 0] - torch.exp(log_pi[:, : k - 1]) * weights.sum()
        d_means = (first - count * means) * prec
        d_log_var = 0.5 * (prec * (second - 2.0 * means * first + means**2 * count) - count)
        grad = torch.cat([d_logits, d_means.flatten(1), d_log_var.flatten(1)], dim=1)
        return log_lik @ weights, grad

    def relabelings(self, theta: Tensor) -> Tensor:
        """All K! orders of the components: (K!, M, D). On the logits, z' = l_σ[:K−1] − l_σ[K]
        with l = (z, 0) is an integer matrix whose inverse (σ⁻¹) is one too, so |det| = 1."""
        m, k, d = theta.shape[0], self.components, self.input_dim
        logits = torch.cat([theta[:, : k - 1], theta.new_zeros(m, 1)], dim=1)
        means = theta[:, k - 1 : k - 1 + k * d].reshape(m, k, d)
        log_var = theta[:, k - 1 + k * d :].reshape(m, k, d)
        orders = torch.tensor(list(itertools.permutations(range(k))), device=theta.device)
        shifted = logits[:, orders].transpose(0, 1)  # (G, M, K)
        return torch.cat(
            [
                shifted[..., : k - 1] - shifted[..., k - 1 :],
                means[:, orders].transpose(0, 1).reshape(len(orders), m, k * d),
                log_var[:, orders].transpose(0, 1).reshape(len(orders), m, k * d),
            ],
            dim=-1,
        )

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        k, d = self.components, self.input_dim
        # π = E/ΣE with E_k ~ Gamma(1), so z_k = log E_k − log E_K.
        log_e = sample_log_gamma(1.0, num * k, generator).reshape(num, k)
        logits = log_e[:, : k - 1] - log_e[:, k - 1 :]
        log_var = math.log(VARIANCE_SCALE) - sample_log_gamma(
            VARIANCE_SHAPE, num * k * d, generator
        ).reshape(num, k * d)
        noise = torch.randn(
            num, k * d, generator=generator, dtype=torch.float64, device=generator.device
        )
        means = noise * torch.exp(0.5 * log_var) * math.sqrt(MEAN_VARIANCE_RATIO)
        return torch.cat([logits, means, log_var], dim=1)

    def mean_field(self) -> MixtureMeanField:
        return MixtureMeanField(self.components)

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """The Bayesian-model-averaged log density at the rows of x: (R,)."""
        assert x is not None
        log_density = weighted_log_mean_exp(self.log_likelihood(theta, x, None), log_weights)
        return Prediction(log_density=log_density)
