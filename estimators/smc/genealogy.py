"""The variance of a run of tempered-SMC steps' log-evidence estimate from the particles'
genealogy (Chan & Lai 2013, Lee & Whiteley 2018, the asymptotic form).

Every particle at the start of the run descends from an "Eve"; resampling copies Eve indices to
the children, the moves leave them. With W⁰_e the starting weights and M_e = Σ_{i: E_i = e} W_i
the final normalised weight mass (after the last reweighting, before its selection) of Eve e's
descendants, the estimate Ẑ of the run's normalising-constant ratio satisfies, to first order,

    Ẑ / Z − 1 ≈ Σ_e (M_e − W⁰_e),

a sum of one term per Eve whose descendants, resampled and moved however often, stay one
correlated unit. So Var(log Ẑ) ≈ Var(Ẑ / Z) ≈ Σ_e (M_e − W⁰_e)². With one step and no resampling
this is the delta-method variance of ``weights.log_mean_increment``; with several steps it also
counts what resampling does (descendants of one Eve share its fate) instead of treating each
step's particles as fresh independent draws. Cost: one index gather per resampling and one
scatter-add per run, O(M) next to the moves' O(M · rows · steps).

With control variates (``smc.control_variates``) a step's estimate is corrected by
−Σ_i W_i bᵀ(s_i − s̄); each particle's share, its ``control_influence``, joins its Eve's term:
Var(log Ẑ) ≈ Σ_e (M_e − W⁰_e − C_e)², C_e the shares of Eve e's descendants over the steps.

Usually the Eves are the run's starting particles (``first_generation``). A cloud that was itself
drawn from a larger weighted one by a selection outside any run (``selected``: the online loop's
return from ``careful_particles`` × M particles to M) starts its next run from the particles that
selection drew from: the selection's noise then reaches the run's Ẑ through the Eves it dropped or
copied, and a run started at the smaller cloud would not count it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.smc.tempered import StepInfo


class Eves(NamedTuple):
    """Where a run's genealogy starts."""

    labels: Tensor  # (M,) int64: the Eve of each starting particle
    weights: Tensor  # (E,) W⁰_e, the Eves' normalised weights (E > every label)
    # Σ W⁰_e² over the Eves no starting particle descends from: their M_e is 0 whatever follows
    lost: float


def first_generation(log_weights: Tensor) -> Eves:
    """Each particle its own Eve, with its weight."""
    count = log_weights.shape[0]
    return Eves(torch.arange(count, device=log_weights.device), torch.exp(log_weights), 0.0)


def selected(log_weights: Tensor, ancestors: Tensor) -> Eves:
    """The Eves of the particles a selection copied (``ancestors``) from a cloud with normalised
    ``log_weights``: the particles it drew from, relabelled 0, 1, … over those with a copy, so
    there are at most as many Eves as copies; the rest are ``lost``."""
    weights = torch.exp(log_weights)
    kept, labels = torch.unique(ancestors, return_inverse=True)
    dropped = torch.ones_like(weights, dtype=torch.bool)
    dropped[kept] = False
    return Eves(labels, weights[kept], float((weights[dropped] ** 2).sum()))


def eve_variance(eves: Eves, steps: Sequence[StepInfo]) -> float:
    """Σ_e (M_e − W⁰_e − C_e)² over the ``steps`` of one run, from its ``eves``."""
    if not steps:
        return 0.0
    labels = eves.labels
    final_labels, final_log_weights = labels, None
    controlled = torch.zeros_like(eves.weights)  # C_e
    for info in steps:
        if info.reweighted_log_weights is None:
            raise ValueError("the steps carry no genealogy (reweighted weights and ancestors)")
        final_labels, final_log_weights = labels, info.reweighted_log_weights
        if info.control_influence is not None:
            controlled.index_add_(0, labels, info.control_influence)
        if info.ancestors is not None:
            labels = labels[info.ancestors]
    assert final_log_weights is not None
    mass = torch.zeros_like(eves.weights).index_add_(
        0, final_labels, torch.exp(final_log_weights)
    )
    return float(((mass - eves.weights - controlled) ** 2).sum()) + eves.lost
