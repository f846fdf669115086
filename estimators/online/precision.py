"""The moves' likelihood gradients in a lower precision than the state (``gradient_dtype``).

Most of a non-conjugate model's update is the likelihood gradients its moves read: GEMMs and
elementwise exp over particles × rows. In float32 they take about half the time of float64 on a
CPU (twice the SIMD width). What that costs in accuracy:

- Exact HMC reads them only to steer its leapfrog. A leapfrog with any deterministic force of θ
  (and a palindromic order of kicks) is a composition of shears, so it stays reversible and
  volume-preserving; the Metropolis test, which reads log π in float64, keeps the chain exactly
  π-invariant. Float32 can cost some acceptance, nothing else.
- SGHMC's minibatch gradients have a relative noise of order 1/√|B|; float32's rounding (about
  1e-7 relative per sum) is orders of magnitude below it.

The same holds for the moves' products with the mass factor L (M⁻¹ = L Lᵀ): θ ← θ + ε L q
is a shear whatever function of q computes L q, and SGHMC's noise dwarfs the rounding. For a
model of more than ``REFERENCE_PARAMETERS`` parameters these products (D² per particle per
leapfrog or SGHMC step) are most of the moves' arithmetic, and so are the prepared sums of a
model whose gradients do not read rows (a linear regression's Φᵀ W Φ: D² per particle too), so
both compute in the gradients' dtype there (``mass_dtype``). At a few parameters the conversions
cost about what float32 saves (linear regression with 6 parameters ran at 0.92–0.96× the
throughput), so smaller models keep float64 for both, bit for bit as before.

The state, the weights, the anchor's full-data sums and every log-likelihood stay in the
state's dtype: the rows are lowered when they are prepared (``Model.weighted_sum``,
``Model.stepwise_sums``) and each θ when it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.online.dimension import REFERENCE_PARAMETERS
from modelcompare.models import Model, WeightedRows, WeightedSum


def gradient_dtype(model: Model, requested: torch.dtype) -> torch.dtype:
    """The dtype ``model``'s move gradients compute in: ``requested``, or where the model's
    prepared sums do not pass over rows (``Model.gradients_read_rows``) ``mass_dtype``'s."""
    return requested if model.gradients_read_rows else mass_dtype(model, requested)


def mass_dtype(model: Model, requested: torch.dtype) -> torch.dtype:
    """The dtype of the moves' products with the mass factor: ``requested`` for a model of more
    than ``REFERENCE_PARAMETERS`` parameters, else the state's (float64)."""
    return requested if model.param_dim > REFERENCE_PARAMETERS else torch.float64


def lowered(parts: Sequence[WeightedRows], dtype: torch.dtype) -> list[WeightedRows]:
    """``parts`` with their rows in ``dtype`` (labels and counts of up to 2²⁴ are exact in
    float32)."""
    return [(*Rows(x, y).in_dtype(dtype), weight) for x, y, weight in parts]


class LoweredSum(NamedTuple):
    """A ``WeightedSum`` prepared on rows in ``dtype``, read at θ of any dtype: it computes in
    ``dtype`` and answers in θ's."""

    sums: WeightedSum
    dtype: torch.dtype

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        value, grad = self.sums.value_and_grad(theta.to(self.dtype))
        return value.to(theta.dtype), grad.to(theta.dtype)

    def grad(self, theta: Tensor) -> Tensor:
        return self.sums.grad(theta.to(self.dtype)).to(theta.dtype)


def weighted_sum(
    model: Model, parts: Sequence[WeightedRows], dtype: torch.dtype, prepared: WeightedSum
) -> WeightedSum:
    """``model.weighted_sum`` of ``parts`` computed in ``dtype``: ``prepared`` (that sum in the
    state's float64) itself, with no conversions, when ``dtype`` is float64."""
    if dtype == torch.float64:
        return prepared
    return LoweredSum(model.weighted_sum(lowered(parts, dtype)), dtype)


def stepwise_sums(
    model: Model,
    fixed: Sequence[WeightedRows],
    streams: Sequence[WeightedRows],
    steps: int,
    dtype: torch.dtype,
) -> list[WeightedSum]:
    """``model.stepwise_sums`` computed in ``dtype`` (as ``weighted_sum``)."""
    if dtype == torch.float64:
        return model.stepwise_sums(fixed, streams, steps)
    sums = model.stepwise_sums(lowered(fixed, dtype), lowered(streams, dtype), steps)
    return [LoweredSum(s, dtype) for s in sums]
