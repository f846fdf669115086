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
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from models.base import Model, Prediction
from models.config import MAX_COMPONENTS, FamilyConfig, Integer, input_dim
from models.gamma_poisson import sample_log_gamma
from models.weighting import weighted_log_mean_exp

VARIANCE_SHAPE = 1.0
VARIANCE_SCALE = 1.0
MEAN_VARIANCE_RATIO = 4.0


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
        log_pi, means, log_var = self._split(theta)
        m, k, d = means.shape
        prec = torch.exp(-log_var)
        # Σ_j (x_j − μ_j)²/σ²_j = Σ_j x_j²/σ²_j − 2 x_j μ_j/σ²_j + μ_j²/σ²_j: one GEMM over (M·K).
        coefs = torch.cat([prec, -2.0 * means * prec], dim=-1).reshape(m * k, 2 * d)
        quad = (coefs @ torch.cat([x**2, x], dim=1).T).reshape(m, k, -1)
        quad = quad + (means**2 * prec).sum(-1, keepdim=True)
        log_norm = -0.5 * (log_var.sum(-1, keepdim=True) + d * math.log(2 * math.pi))
        return torch.logsumexp(log_pi[:, :, None] + log_norm - 0.5 * quad, dim=1)

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

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """The Bayesian-model-averaged log density at the rows of x: (R,)."""
        assert x is not None
        log_density = weighted_log_mean_exp(self.log_likelihood(theta, x, None), log_weights)
        return Prediction(log_density=log_density)
