"""The variance rule of the piece kernel: each piece's variance of log Ẑ
(docs/design/standard-error.md).

``genealogy``: from the particles' Eve groups over the piece's steps (``smc.genealogy``),
starting from the Eves the state's ``genealogy`` slot carries (after a piece that ended with a
selection back to M particles, the particles it drew from) and leaving there those of the next
piece. ``delta``: the sum of the steps' delta-method variances; it keeps no state.
"""

from __future__ import annotations

import torch

from modelcompare.estimators.online.kernel import Annealed, VarianceRule
from modelcompare.estimators.online.state import GenealogyState, ParticleState
from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation, selected


def genealogy(
    before: ParticleState, after: ParticleState, piece: Annealed
) -> tuple[float, ParticleState]:
    variance = eve_variance(starting_eves(before), piece.steps)
    if piece.selection is None:
        next_eves = first_generation(piece.log_weights)
    else:
        next_eves = selected(*piece.selection)
    return variance, after._replace(genealogy=stored(next_eves))


def delta(
    before: ParticleState, after: ParticleState, piece: Annealed
) -> tuple[float, ParticleState]:
    return sum(info.log_evidence_increment_variance for info in piece.steps), after


RULES: dict[str, VarianceRule] = {"genealogy": genealogy, "delta": delta}


def starting_eves(state: ParticleState) -> Eves:
    """The Eves the next piece's genealogy starts from (the particles themselves when the slot
    is empty)."""
    slot = state.genealogy
    if not slot.eves.numel():
        return first_generation(state.log_weights)
    return Eves(slot.eves, slot.eve_weights, float(slot.lost_eves))


def stored(eves: Eves) -> GenealogyState:
    """``eves`` as the slot holds them: their weights padded with zeros to one per particle."""
    count = eves.labels.shape[0]
    weights = torch.zeros(count, dtype=eves.weights.dtype, device=eves.weights.device)
    weights[: eves.weights.shape[0]] = eves.weights
    lost = torch.tensor(eves.lost, dtype=weights.dtype, device=weights.device)
    return GenealogyState(eves.labels, weights, lost)
