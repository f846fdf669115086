"""Resampling schemes: ``count`` ancestor indices from normalised weights (Douc, Cappé & Moulines
2005), and the ESS-triggered selection step of an SMC sampler.

All four schemes are unbiased: E[#copies of i] = count · W_i. Systematic and stratified have lower
variance than multinomial; residual keeps floor(count · W_i) copies deterministically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

# (weights (M,), generator, count (M when None)) -> ancestor indices (count,)
Resampler = Callable[[Tensor, torch.Generator, int | None], Tensor]


def _invert_cdf(weights: Tensor, uniforms: Tensor) -> Tensor:
    cdf = torch.cumsum(weights, dim=0)
    cdf[-1] = 1.0  # guard against round-off leaving the last bin short
    return torch.searchsorted(cdf, uniforms, right=True).clamp_(max=weights.shape[0] - 1)


def _uniform(size: int, generator: torch.Generator, like: Tensor) -> Tensor:
    return torch.rand(size, generator=generator, dtype=like.dtype, device=like.device)


def _grid(count: int, like: Tensor) -> Tensor:
    return torch.arange(count, dtype=like.dtype, device=like.device)


def multinomial(weights: Tensor, generator: torch.Generator, count: int | None = None) -> Tensor:
    count = weights.shape[0] if count is None else count
    uniforms, _ = torch.sort(_uniform(count, generator, weights))
    return _invert_cdf(weights, uniforms)


def stratified(weights: Tensor, generator: torch.Generator, count: int | None = None) -> Tensor:
    count = weights.shape[0] if count is None else count
    offsets = _uniform(count, generator, weights)
    return _invert_cdf(weights, (_grid(count, weights) + offsets) / count)


def systematic(weights: Tensor, generator: torch.Generator, count: int | None = None) -> Tensor:
    count = weights.shape[0] if count is None else count
    offset = _uniform(1, generator, weights)
    return _invert_cdf(weights, (_grid(count, weights) + offset) / count)


def residual(weights: Tensor, generator: torch.Generator, count: int | None = None) -> Tensor:
    m = weights.shape[0]
    count = m if count is None else count
    scaled = count * weights
    copies = torch.floor(scaled).to(torch.long)
    kept = torch.repeat_interleave(torch.arange(m, device=weights.device), copies)
    remaining = count - int(copies.sum())
    if remaining == 0:
        return kept
    leftover = scaled - copies
    drawn = torch.multinomial(
        leftover / leftover.sum(), remaining, replacement=True, generator=generator
    )
    return torch.sort(torch.cat([kept, drawn])).values


RESAMPLERS: dict[str, Resampler] = {
    "systematic": systematic,
    "stratified": stratified,
    "residual": residual,
    "multinomial": multinomial,
}


class Selected(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,) normalised
    resampled: bool
    ancestors: Tensor | None = None  # (M,) the index each particle was copied from, if resampled


# (particles, normalised log-weights, their ESS, generator) -> what the move starts from
Selection = Callable[[Tensor, Tensor, float, torch.Generator], Selected]


def resample_below(threshold: float, resampler: Resampler) -> Selection:
    """Resample to equal weights when ESS / M falls below ``threshold``; else keep the weights."""

    def select(
        particles: Tensor, log_weights: Tensor, ess: float, generator: torch.Generator
    ) -> Selected:
        m = particles.shape[0]
        if ess >= threshold * m:
            return Selected(particles, log_weights, False)
        return equally_weighted(particles, log_weights, generator, resampler, m)

    return select


def resample_to(count: int, resampler: Resampler) -> Selection:
    """Resample to ``count`` particles with equal weights whatever the ESS: the population
    changes size (Ẑ stays unbiased: resampling is an unbiased selection at any count)."""

    def select(
        particles: Tensor, log_weights: Tensor, ess: float, generator: torch.Generator
    ) -> Selected:
        return equally_weighted(particles, log_weights, generator, resampler, count)

    return select


def equally_weighted(
    particles: Tensor,
    log_weights: Tensor,
    generator: torch.Generator,
    resampler: Resampler,
    count: int,
) -> Selected:
    """``count`` copies drawn by ``resampler`` from the weighted particles, weights 1/count."""
    ancestors = resampler(torch.exp(log_weights), generator, count)
    return Selected(particles[ancestors], equal_log_weights(log_weights, count), True, ancestors)


def equal_log_weights(like: Tensor, count: int) -> Tensor:
    """``count`` log-weights of 1/count, of the dtype and device of ``like``."""
    return torch.full((count,), -math.log(count), dtype=like.dtype, device=like.device)


def drop_weights(
    particles: Tensor, log_weights: Tensor, ess: float, generator: torch.Generator
) -> Selected:
    """Forget the weights without resampling (sequential SGHMC: the moves alone carry the
    particles to the new posterior)."""
    m = particles.shape[0]
    return Selected(particles, torch.full_like(log_weights, -math.log(m)), False)
