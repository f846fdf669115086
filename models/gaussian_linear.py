"""Conjugate maths the two linear regressions share: the design Φ = [x, 1] and a Gaussian
posterior over β = (w, b) in information form, Λ = I/τ² + ΦᵀΦ/s² and h = Λμ = Φᵀy/s² (Bishop,
PRML eq. 3.50-3.51; s² = σ² for known noise, s² = 1 when β's covariance scales with σ²).

The sufficient statistics are a dict of float64 tensors: ``precision`` Λ, ``shift`` h, ``count``
n and ``sum_y2`` Σy² (what the log evidence needs beyond Λ and h).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


def design(x: Tensor) -> Tensor:
    """Φ = [x, 1]: the inputs (..., R, P) with a bias column appended."""
    ones = torch.ones(*x.shape[:-1], 1, dtype=x.dtype, device=x.device)
    return torch.cat([x, ones], dim=-1)


def regression_inputs(dim: int, x: Tensor | None, y: Tensor | None) -> Tensor:
    """``x``, or for an intercept-only model (``dim`` 0) empty (R, 0) inputs with the rows,
    dtype and device of ``x`` or ``y`` (one float64 row when both are None)."""
    if dim:
        assert x is not None
        return x
    reference = x if x is not None else y
    if reference is None:
        return torch.zeros(1, 0, dtype=torch.float64)
    return reference.new_zeros(reference.shape[0], 0)


def prior_information(dim: int, prior_std: float) -> dict[str, Tensor]:
    """Λ = I/τ², h = 0, n = 0, Σy² = 0 for β ~ N(0, τ²I) in ``dim`` dimensions."""
    return {
        "precision": torch.eye(dim, dtype=torch.float64) / prior_std**2,
        "shift": torch.zeros(dim, dtype=torch.float64),
        "count": torch.zeros((), dtype=torch.float64),
        "sum_y2": torch.zeros((), dtype=torch.float64),
    }


def add_rows(
    stats: dict[str, Tensor], x: Tensor, y: Tensor, noise_variance: float = 1.0
) -> dict[str, Tensor]:
    """The statistics after conditioning on rows (x, y) with noise variance s²."""
    phi = design(x)
    return {
        "precision": stats["precision"] + phi.T @ phi / noise_variance,
        "shift": stats["shift"] + phi.T @ y / noise_variance,
        "count": stats["count"] + y.shape[0],
        "sum_y2": stats["sum_y2"] + (y**2).sum(),
    }


class GaussianPosterior(NamedTuple):
    """N(μ, Λ⁻¹) from the statistics, through the Cholesky factor of Λ."""

    chol: Tensor  # lower L with L Lᵀ = Λ
    shift: Tensor  # h = Λμ

    @classmethod
    def of(cls, stats: dict[str, Tensor]) -> GaussianPosterior:
        return cls(torch.linalg.cholesky(stats["precision"]), stats["shift"])

    def mean(self) -> Tensor:
        """μ = Λ⁻¹h."""
        return torch.cholesky_solve(self.shift[:, None], self.chol)[:, 0]

    def quadratic(self) -> Tensor:
        """hᵀΛ⁻¹h."""
        return (self.mean() * self.shift).sum()

    def log_det(self) -> Tensor:
        """log |Λ|."""
        return 2.0 * torch.log(torch.diagonal(self.chol)).sum()

    def variances(self) -> Tensor:
        """diag Λ⁻¹."""
        return torch.diagonal(torch.cholesky_inverse(self.chol))

    def predictive_terms(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """φᵀμ and φᵀΛ⁻¹φ for each query row's φ = [x, 1]."""
        phi = design(x)
        spread = (phi * torch.cholesky_solve(phi.T, self.chol).T).sum(-1)
        return phi @ self.mean(), spread
