"""A tempered target whose data term is read in minibatches, and its Barker log-ratio test.

    log π(θ) = log p(θ) + λ·Σ_{r ∈ chunk} ℓ_r(θ) + Σ_{i ≤ n} ℓ_i(θ)      (design doc, step 4)

The prior and the chunk are evaluated exactly; the past rows enter Δ = log π(θ') − log π(θ)
through ``barker_test``. With a control-variate anchor θ_a (Σ_i ∇ℓ_i(θ_a) known over all past
rows) the per-row terms are the Taylor residuals (Bardenet et al. 2017, sec. 6.2)

    d_i = ℓ_i(θ') − ℓ_i(θ) − ∇ℓ_i(θ_a)ᵀ(θ' − θ),    Δ = exact + Σ_i ∇ℓ_i(θ_a)ᵀ(θ' − θ) + Σ_i d_i,

which are O(|θ' − θ|·|θ − θ_a|) instead of O(|θ' − θ|), so the test needs far fewer rows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.moves.barker import BarkerResult, barker_test
from modelcompare.estimators.online.target import Anchor
from modelcompare.models import Model


class MinibatchTarget(NamedTuple):
    model: Model
    past: History  # the rows read in minibatches
    chunk: Rows | None = None  # rows evaluated exactly, at ``temperature``
    temperature: float = 1.0
    anchor: Anchor | None = None  # control variate: Σ over all of ``past`` of ∇ℓ_i(θ_a)


def exact_log_density(target: MinibatchTarget, theta: Tensor) -> Tensor:
    """log p(θ) + λ·log p(chunk | θ): the part of log π evaluated in full, (M,)."""
    value = target.model.log_prior(theta)
    if target.chunk is not None and target.temperature > 0.0:
        chunk = target.chunk
        value = value + target.temperature * target.model.log_likelihood(
            theta, chunk.x, chunk.y
        ).sum(-1)
    return value


def barker_log_ratio_test(
    target: MinibatchTarget,
    theta: Tensor,
    proposal: Tensor,
    exact_extra: Tensor,
    batch_size: int,
    generator: torch.Generator,
) -> BarkerResult:
    """Barker test of θ → θ' for log ratio log π(θ') − log π(θ) + ``exact_extra`` (M,), the
    latter carrying the proposal's own terms (kinetic energies, proposal densities)."""
    model, anchor = target.model, target.anchor
    shift = proposal - theta
    exact = exact_log_density(target, proposal) - exact_log_density(target, theta) + exact_extra
    if anchor is not None:
        exact = exact + shift @ anchor.grad_sum

    def row_terms(active: Tensor, rows: Rows) -> Tensor:
        terms = model.log_likelihood(proposal[active], rows.x, rows.y) - model.log_likelihood(
            theta[active], rows.x, rows.y
        )
        if anchor is None:
            return terms
        return terms - _directional_derivative(model, anchor.point, shift[active], rows)

    return barker_test(exact, row_terms, target.past, batch_size, generator)


def _directional_derivative(model: Model, point: Tensor, directions: Tensor, rows: Rows) -> Tensor:
    """∇ℓ_r(θ_a)ᵀ v_m for every direction v_m (A, D) and row r: (A, R).

    Two reverse passes (the "double-backward" trick): with f(s) = ℓ(θ_a + s v_m) (A, R),
    ∂/∂u [∂/∂s Σ u ⊙ f(s)] = f'(0) for any u; torch's forward mode would do it in one pass but
    goes through TorchScript decompositions (slow first call, deprecation warnings).
    """
    with torch.enable_grad():
        step = torch.zeros((), dtype=point.dtype, device=point.device, requires_grad=True)
        values = model.log_likelihood(point[None] + step * directions, rows.x, rows.y)
        weights = torch.zeros_like(values, requires_grad=True)
        (slope,) = torch.autograd.grad((values * weights).sum(), step, create_graph=True)
        (derivative,) = torch.autograd.grad(slope, weights)
    return derivative
