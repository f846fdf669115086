"""The variance of a run of tempered-SMC steps' log-evidence estimate from the particles'
genealogy (Chan & Lai 2013, Lee & Whiteley 2018, the asymptotic form).

Every particle at the start of the run is an "Eve"; resampling copies Eve indices to the
children, the moves leave them. With W⁰_e the starting weights and M_e = Σ_{i: E_i = e} W_i the
final normalised weight mass (after the last reweighting, before its selection) of Eve e's
descendants, the estimate Ẑ of the run's normalising-constant ratio satisfies, to first order,

    Ẑ / Z − 1 ≈ Σ_e (M_e − W⁰_e),

a sum of one term per Eve whose descendants, resampled and moved however often, stay one
correlated unit. So Var(log Ẑ) ≈ Var(Ẑ / Z) ≈ Σ_e (M_e − W⁰_e)². With one step and no resampling
this is the delta-method variance of ``weights.log_mean_increment``; with several steps it also
counts what resampling does (descendants of one Eve share its fate) instead of treating each
step's particles as fresh independent draws. Cost: one index gather per resampling and one
scatter-add per run, O(M) next to the moves' O(M · rows · steps).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from estimators.smc.tempered import StepInfo


def eve_variance(initial_log_weights: Tensor, steps: Sequence[StepInfo]) -> float:
    """Σ_e (M_e − W⁰_e)² over the ``steps`` of one run, from its starting normalised weights."""
    if not steps:
        return 0.0
    count = initial_log_weights.shape[0]
    eves = torch.arange(count, device=initial_log_weights.device)
    final_eves, final_log_weights = eves, initial_log_weights
    for info in steps:
        if info.reweighted_log_weights is None:
            raise ValueError("the steps carry no genealogy (reweighted weights and ancestors)")
        final_eves, final_log_weights = eves, info.reweighted_log_weights
        if info.ancestors is not None:
            eves = eves[info.ancestors]
    start = torch.exp(initial_log_weights)
    mass = torch.zeros_like(start).index_add_(0, final_eves, torch.exp(final_log_weights))
    return float(((mass - start) ** 2).sum())
