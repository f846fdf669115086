"""Weighted particle averages used by posterior predictives, and rows weighted part by part."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# Rows x (R, P) or None, y (R,) or None, and the weight each of their log-likelihoods carries.
WeightedRows = tuple[Tensor | None, Tensor | None, float]


def normalized_weights(log_weights: Tensor) -> Tensor:
    """exp of log-weights normalised to sum to one, computed stably: (M,)."""
    return torch.softmax(log_weights, dim=0)


def weighted_mean_and_variance(values: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance over particles (dim 0) of ``values`` (M, ...) under ``weights`` (M,)."""
    shape = (-1,) + (1,) * (values.ndim - 1)
    w = weights.reshape(shape)
    mean = (w * values).sum(0)
    variance = (w * (values - mean) ** 2).sum(0)
    return mean, variance


def weighted_log_mean_exp(log_values: Tensor, log_weights: Tensor) -> Tensor:
    """log Σ_m W_m exp(log_values[m, ...]) with W the normalised weights: a mixture density."""
    shape = (-1,) + (1,) * (log_values.ndim - 1)
    log_w = torch.log_softmax(log_weights, dim=0).reshape(shape)
    return torch.logsumexp(log_w + log_values, dim=0)


def joined_rows(parts: Sequence[WeightedRows]) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """The parts' rows stacked, x (R, P) or None, y (R,) or None, with each row's weight (R,)."""
    xs = [x for x, _, _ in parts if x is not None]
    ys = [y for _, y, _ in parts if y is not None]
    reference = ys[0] if ys else xs[0]
    weights = [
        torch.full(
            ((x if y is None else y).shape[0],), w, dtype=reference.dtype, device=reference.device
        )
        for x, y, w in parts
    ]
    return (
        torch.cat(xs) if xs else None,
        torch.cat(ys) if ys else None,
        torch.cat(weights),
    )


def stepwise_rows(
    fixed: Sequence[WeightedRows], stream: WeightedRows, steps: int
) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """``joined_rows`` of ``fixed`` and each of ``steps`` equal consecutive slices of
    ``stream``, stacked: x (steps, R, P) or None, y (steps, R) or None, weights (steps, R)."""
    x, y, weight = stream
    reference = x if y is None else y
    assert reference is not None
    size = reference.shape[0] // steps
    x = None if x is None else x.reshape(steps, size, x.shape[1])
    y = None if y is None else y.reshape(steps, size)
    weights = torch.full((steps, size), weight, dtype=reference.dtype, device=reference.device)
    if not fixed:
        return x, y, weights
    fixed_x, fixed_y, fixed_weights = joined_rows(fixed)
    if x is not None and fixed_x is not None:
        x = torch.cat([fixed_x.expand(steps, -1, -1), x], 1)
    if y is not None and fixed_y is not None:
        y = torch.cat([fixed_y.expand(steps, -1), y], 1)
    return x, y, torch.cat([fixed_weights.expand(steps, -1), weights], 1)
