"""Importance weights in log space: normalisation, effective sample size, log-mean increments."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def log_normalize(log_weights: Tensor) -> Tensor:
    """Log-weights shifted so that their exponentials sum to one."""
    return log_weights - torch.logsumexp(log_weights, dim=0)


def ess(log_weights: Tensor) -> float:
    """Kish effective sample size 1 / Σ W² of (possibly unnormalised) log-weights."""
    w = torch.softmax(log_weights, dim=0)
    return float(1.0 / (w * w).sum())


def conditional_ess(log_weights: Tensor, log_increments: Tensor) -> float:
    """Conditional ESS of incremental weights under current weights (Zhou et al. 2016, eq. 3.16):
    CESS = M (Σ W_i w_i)² / Σ W_i w_i², a fraction-of-M scale that does not reset on resampling."""
    return conditional_ess_normalized(log_normalize(log_weights), log_increments)


def conditional_ess_normalized(log_w: Tensor, log_increments: Tensor) -> float:
    """``conditional_ess`` of log-weights already normalised (a bisection over Δ reuses them)."""
    num = 2.0 * torch.logsumexp(log_w + log_increments, dim=0)
    den = torch.logsumexp(log_w + 2.0 * log_increments, dim=0)
    return float(log_w.shape[0] * torch.exp(num - den))


def log_mean_increment(log_weights: Tensor, log_increments: Tensor) -> tuple[float, float]:
    """log Σ W_i w_i (the log normalising-constant ratio of one SMC step) and its delta-method
    variance Σ W_i² (w_i / Ŝ − 1)², treating the weighted particles as independent draws."""
    log_w = log_normalize(log_weights)
    log_s = torch.logsumexp(log_w + log_increments, dim=0)
    ratio = torch.exp(log_increments - log_s)
    variance = (torch.exp(2.0 * log_w) * (ratio - 1.0) ** 2).sum()
    return float(log_s), float(variance)


def log_mean_exp(values: Tensor) -> float:
    return float(torch.logsumexp(values, dim=0) - math.log(values.shape[0]))
