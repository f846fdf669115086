"""Products with a move's mass factor L (M⁻¹ = L Lᵀ), computed in L's dtype.

A move may hold L in a lower precision than the particles (``online.precision.mass_dtype``):
each product is computed in L's dtype and answered in the operand's, so positions, momenta and
their sums stay in the state's dtype. Where the dtypes agree nothing is converted.
"""

from __future__ import annotations

import torch
from torch import Tensor


def to_position(velocity: Tensor, factor: Tensor) -> Tensor:
    """L u for each row u of ``velocity`` (M, D): a whitened velocity in θ's coordinates."""
    if velocity.dtype == factor.dtype:
        return velocity @ factor.T
    return (velocity.to(factor.dtype) @ factor.T).to(velocity.dtype)


def whitened(gradient: Tensor, factor: Tensor, out: Tensor | None = None) -> Tensor:
    """Lᵀ g for each row g of ``gradient`` (M, D), written into ``out`` if given."""
    if gradient.dtype == factor.dtype:
        return torch.mm(gradient, factor, out=out)
    product = torch.mm(gradient.to(factor.dtype), factor).to(gradient.dtype)
    return product if out is None else out.copy_(product)
