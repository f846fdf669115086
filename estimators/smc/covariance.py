"""The weighted particle cloud's covariance factor: the mass matrix of the moves."""

from __future__ import annotations

import torch
from torch import Tensor

from estimators.errors import EstimatorError


def particle_scale(theta: Tensor, log_weights: Tensor) -> Tensor:
    """Lower Cholesky factor L of the weighted particle covariance, L Lᵀ = Cov_W(θ): (D, D).

    A full (not diagonal) factor: posteriors with non-identified directions (softmax weights)
    have marginal variances far above their conditional ones, and only the full covariance sees
    that. A relative jitter of 1e-9 keeps the factorisation defined when particles coincide.
    """
    weights = torch.softmax(log_weights, 0)
    centred = theta - weights @ theta
    cov = (centred * weights[:, None]).T @ centred
    jitter = 1e-9 * float(cov.diagonal().mean()) + torch.finfo(theta.dtype).tiny
    eye = torch.eye(theta.shape[1], dtype=theta.dtype, device=theta.device)
    factor, info = torch.linalg.cholesky_ex(cov + jitter * eye)
    if int(info) != 0 or not torch.isfinite(factor).all():
        raise EstimatorError(
            "the particle covariance is not positive definite (particles diverged)"
        )
    return factor
