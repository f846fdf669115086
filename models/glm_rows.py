"""Row gradients of the families whose row r's log-likelihood gradient is a scalar residual
times its design row, ∇ℓ_r(θ) = e_r(θ) Φ_r with Φ = [x, 1]: linear regression (e_r = (y_r −
Φ_rᵀθ) / σ²) and Poisson regression (e_r = y_r − exp(Φ_rᵀθ)).

The moves' gradient-noise estimate multiplies every particle's row gradients by the mass factor
(``Model.row_grad_log_likelihood_times``): M·R·D·C operations from the (M, R, D) gradients, M·R·C
from the residuals once Φ A is formed (R·D·C, shared by the particles).
"""

from __future__ import annotations

from torch import Tensor

from modelcompare.models.gaussian_linear import design


def residual_rows_times(residuals: Tensor, x: Tensor, matrix: Tensor) -> Tensor:
    """(e_mr Φ_r) A per particle and row (M, R, C) from the residuals e (M, R), the inputs x
    (R, D − 1) and A = ``matrix`` (D, C)."""
    return residuals[..., None] * (design(x) @ matrix)
