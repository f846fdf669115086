"""Gradient of the tempered log target of one annealing step, with control variates.

log π_λ(θ) = λ·log p(chunk|θ) + Σ_{i≤n} log p(y_i|θ) + log p(θ)   (design doc, step 4).
The past-data sum is exact while the history fits in a minibatch; beyond that it is the
control-variate estimate (Baker et al. 2019, eq. 6)
    Σ_i ∇ℓ_i(θ_a) + (n/|B|) Σ_{b∈B} [∇ℓ_b(θ) − ∇ℓ_b(θ_a)],
or the plain minibatch estimate (n/|B|) Σ_b ∇ℓ_b(θ) without control variates. The anchor θ_a is a
point near the posterior; Σ_i ∇ℓ_i(θ_a) over *all* past rows is kept current chunk by chunk.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from estimators.history import History, Rows, cat_rows
from models import Model


class Anchor(NamedTuple):
    point: Tensor  # (D,)
    grad_sum: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)


class PastData(NamedTuple):
    """How the past enters the gradient: all rows (small n) or minibatches of a history."""

    history: History
    full: Rows | None  # every past row while the history is small enough to use in full
    batch_size: int
    anchor: Anchor | None  # None: plain minibatch gradients


def anchor_at(model: Model, point: Tensor, history: History, block_rows: int = 65536) -> Anchor:
    """A control-variate anchor: one full pass over the history at ``point``."""
    total = torch.zeros_like(point)
    for rows in history.blocks(block_rows):
        total += model.grad_log_likelihood(point[None], rows.x, rows.y)[0]
    return Anchor(point, total)


def past_data(
    history: History, full_batch_rows: int, batch_size: int, anchor: Anchor | None
) -> PastData:
    if len(history) <= full_batch_rows:
        full = cat_rows(list(history.blocks(max(len(history), 1)))) if len(history) else None
        return PastData(history, full, batch_size, None)
    return PastData(history, None, batch_size, anchor)


def log_target(
    model: Model, theta: Tensor, chunk: Rows, temperature: float, past: PastData
) -> tuple[Tensor, Tensor]:
    """log π_λ(θ) and its gradient, exactly: only while the past is used in full."""
    if len(past.history) > 0 and past.full is None:
        raise ValueError("the exact tempered target needs the full past data")
    value = model.log_prior(theta)
    grad = model.grad_log_prior(theta)
    parts = [(chunk, temperature)] if temperature > 0.0 else []
    if past.full is not None:
        parts.append((past.full, 1.0))
    for rows, weight in parts:
        part_value, part_grad = model.log_likelihood_and_grad(theta, rows.x, rows.y, weight)
        value = value + part_value
        grad = grad + part_grad
    return value, grad


def grad_log_target(
    model: Model,
    theta: Tensor,
    chunk: Rows,
    temperature: float,
    past: PastData,
    generator: torch.Generator,
) -> Tensor:
    """Minibatch estimate of ∇ log π_λ(θ); the full-past case is ``log_target``'s (exact HMC)."""
    if past.full is not None or len(past.history) == 0:
        raise ValueError("minibatch gradients are for a past too large to use in full")
    grad = model.grad_log_prior(theta)
    if temperature > 0.0:
        grad = grad + model.grad_log_likelihood(theta, chunk.x, chunk.y, temperature)
    batch = past.history.sample(past.batch_size, generator)
    scale = len(past.history) / past.batch_size
    grad = grad + model.grad_log_likelihood(theta, batch.x, batch.y, scale)
    if past.anchor is None:
        return grad
    anchor = past.anchor
    at_anchor = model.grad_log_likelihood(anchor.point[None], batch.x, batch.y, scale)
    return grad + (anchor.grad_sum - at_anchor[0])


def gradient_noise(
    model: Model, theta: Tensor, past: PastData, generator: torch.Generator
) -> Tensor:
    """A factor G (M, B, D) of the covariance of ``grad_log_target``'s estimate at each particle.

    The estimate's noise is (n/|B|) Σ_b d_b with d_b = ∇ℓ_b(θ) − ∇ℓ_b(θ_a) (or ∇ℓ_b(θ) without
    an anchor), rows drawn with replacement, so its covariance is (n²/|B|) Cov(d). One fresh
    minibatch of ``batch_size`` rows estimates Cov(d) per particle, and
    G = n (|B|(|B| − 1))^(-1/2) (d − d̄) gives Gᵀ G = (n²/|B|) · the sample covariance.
    """
    batch = past.history.sample(past.batch_size, generator)
    rows = model.row_grad_log_likelihood(theta, batch.x, batch.y)  # (M, B, D)
    if past.anchor is not None:
        rows = rows - model.row_grad_log_likelihood(past.anchor.point[None], batch.x, batch.y)
    size = past.batch_size
    centred = rows - rows.mean(1, keepdim=True)
    return centred * (len(past.history) / (size * max(size - 1, 1)) ** 0.5)
