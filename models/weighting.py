"""Weighted particle averages used by posterior predictives."""

from __future__ import annotations

import torch
from torch import Tensor


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
