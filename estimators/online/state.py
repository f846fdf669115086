"""The state an online particle method carries from chunk to chunk: a core of six fields, the
particle system and its running log Z, and one slot per extension that keeps state of its own
(``reestimate``, ``standard_error``, the pooled mass ``smc.mass``), each a small record with
defaults.

Stored (``data.serialization``), a state is flat: a slot's fields are keyed ``slot_field`` or by
the names its type declares in ``stored_keys``: the keys of states written before the slots
existed, which load as they are.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.settings import ParticleSettings
from modelcompare.estimators.smc.mass import NO_POOL, MassPool
from modelcompare.models import Model

_INT, _FLOAT = torch.int64, torch.float64


class AnchorState(NamedTuple):
    """The control-variate anchor θ_a of the past's minibatch gradients (``anchor``)."""

    point: Tensor  # (D,) θ_a
    grad: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)
    rows: Tensor  # () int64: rows seen when the anchor was set; 0 = no anchor yet


class ReestimateState(NamedTuple):
    """Where the re-estimates stand (``reestimate``)."""

    stored_keys = MappingProxyType({"last_rows": "restart_rows", "astray_rows": "astray_rows"})

    # () int64: rows seen at the last re-estimate over all rows; 0 = none
    last_rows: Tensor = torch.zeros((), dtype=_INT)
    # () int64: rows seen when a chunk first left the particles astray since then; 0 = none
    astray_rows: Tensor = torch.zeros((), dtype=_INT)
    # () int64: the annealing steps of the stream's exact phase, prior to the posterior of its
    # rows; 0 = not known (a state stored before the field existed)
    exact_steps: Tensor = torch.zeros((), dtype=_INT)


class GenealogyState(NamedTuple):
    """The Eves the next piece's genealogy starts from (``smc.genealogy.Eves``;
    ``standard_error``): after a piece that ended with a selection back to M particles, the
    particles it drew from; after any other piece, the particles themselves. Written at the
    fixed length M, so that ``islands`` can stack them. Empty: the particles themselves (a state
    not yet updated, or one stored before the fields existed)."""

    stored_keys = MappingProxyType(
        {"eves": "eves", "eve_weights": "eve_weights", "lost_eves": "lost_eves"}
    )

    eves: Tensor = torch.zeros(0, dtype=_INT)  # (M,) each particle's Eve
    eve_weights: Tensor = torch.zeros(0, dtype=_FLOAT)  # (M,) W⁰_e; 0 past the last Eve
    lost_eves: Tensor = torch.zeros((), dtype=_FLOAT)  # () Σ W⁰_e² of Eves left no copy


class ParticleState(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,), normalised
    log_evidence: Tensor  # ()
    log_evidence_variance: Tensor  # () sum over pieces of their variances (``standard_error``)
    n_observations: Tensor  # () int64
    anchor: AnchorState
    reestimate: ReestimateState = ReestimateState()
    genealogy: GenealogyState = GenealogyState()
    mass: MassPool = NO_POOL  # the moves' pooled covariance (``smc.mass``; empty: none)


def init(model: Model, settings: ParticleSettings, generator: torch.Generator) -> ParticleState:
    """M prior draws with equal weights, log Z = 0, no anchor."""
    m, d, device = settings.particles, model.param_dim, settings.torch_device
    zero = torch.zeros((), dtype=_FLOAT, device=device)
    return ParticleState(
        particles=model.sample_prior(m, generator),
        log_weights=torch.full((m,), -math.log(m), dtype=_FLOAT, device=device),
        log_evidence=zero,
        log_evidence_variance=zero.clone(),
        n_observations=torch.zeros((), dtype=_INT, device=device),
        anchor=AnchorState(
            point=torch.zeros(d, dtype=_FLOAT, device=device),
            grad=torch.zeros(d, dtype=_FLOAT, device=device),
            rows=torch.zeros((), dtype=_INT, device=device),
        ),
        reestimate=ReestimateState(
            *(torch.zeros((), dtype=_INT, device=device) for _ in ReestimateState._fields)
        ),
    )
