"""Resampling schemes: ancestor indices from normalised weights (Douc, Cappé & Moulines 2005).

All four are unbiased: E[#copies of i] = M W_i. Systematic and stratified have lower variance
than multinomial; residual keeps floor(M W_i) copies deterministically.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Resampler = Callable[[Tensor, torch.Generator], Tensor]


def _invert_cdf(weights: Tensor, uniforms: Tensor) -> Tensor:
    cdf = torch.cumsum(weights, dim=0)
    cdf[-1] = 1.0  # guard against round-off leaving the last bin short
    return torch.searchsorted(cdf, uniforms, right=True).clamp_(max=weights.shape[0] - 1)


def multinomial(weights: Tensor, generator: torch.Generator) -> Tensor:
    m = weights.shape[0]
    uniforms, _ = torch.sort(torch.rand(m, generator=generator, dtype=weights.dtype))
    return _invert_cdf(weights, uniforms)


def stratified(weights: Tensor, generator: torch.Generator) -> Tensor:
    m = weights.shape[0]
    offsets = torch.rand(m, generator=generator, dtype=weights.dtype)
    return _invert_cdf(weights, (torch.arange(m, dtype=weights.dtype) + offsets) / m)


def systematic(weights: Tensor, generator: torch.Generator) -> Tensor:
    m = weights.shape[0]
    offset = torch.rand(1, generator=generator, dtype=weights.dtype)
    return _invert_cdf(weights, (torch.arange(m, dtype=weights.dtype) + offset) / m)


def residual(weights: Tensor, generator: torch.Generator) -> Tensor:
    m = weights.shape[0]
    scaled = m * weights
    copies = torch.floor(scaled).to(torch.long)
    kept = torch.repeat_interleave(torch.arange(m), copies)
    remaining = m - int(copies.sum())
    if remaining == 0:
        return kept
    leftover = scaled - copies
    drawn = torch.multinomial(leftover / leftover.sum(), remaining, replacement=True,
                              generator=generator)
    return torch.sort(torch.cat([kept, drawn])).values


RESAMPLERS: dict[str, Resampler] = {
    "systematic": systematic,
    "stratified": stratified,
    "residual": residual,
    "multinomial": multinomial,
}
