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
    fixed: Sequence[WeightedRows], streams: Sequence[WeightedRows], steps: int
) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """``joined_rows`` of ``fixed`` and, after them, the i-th of ``steps`` equal consecutive
    slices of each of ``streams``, stacked over i: x (steps, R, P) or None, y (steps, R) or None,
    weights (steps, R)."""
    xs, ys, weights = [], [], []
    for x, y, weight in streams:
        reference = x if y is None else y
        assert reference is not None
        size = reference.shape[0] // steps
        if x is not None:
            xs.append(x.reshape(steps, size, x.shape[1]))
        if y is not None:
            ys.append(y.reshape(steps, size))
        weights.append(
            torch.full((steps, size), weight, dtype=reference.dtype, device=reference.device)
        )
    if fixed:
        fixed_x, fixed_y, fixed_weights = joined_rows(fixed)
        if fixed_x is not None:
            xs.insert(0, fixed_x.expand(steps, -1, -1))
        if fixed_y is not None:
            ys.insert(0, fixed_y.expand(steps, -1))
        weights.insert(0, fixed_weights.expand(steps, -1))
    return (
        torch.cat(xs, 1) if xs else None,
        torch.cat(ys, 1) if ys else None,
        torch.cat(weights, 1),
    )
