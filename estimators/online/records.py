"""The records of the online particle methods' chunk loop (``particles``): the state it carries
from chunk to chunk, and what a method brings to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.online.piece_parts import Parts
from modelcompare.estimators.online.restart import Restart
from modelcompare.estimators.online.settings import PastDataSettings
from modelcompare.estimators.online.surprise import Surprise
from modelcompare.estimators.smc.genealogy import Eves
from modelcompare.estimators.smc.resampling import Selection
from modelcompare.models import Model


class ParticleState(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,), normalised
    log_evidence: Tensor  # ()
    log_evidence_variance: Tensor  # () sum over pieces of their variances (``standard_error``)
    n_observations: Tensor  # () int64
    anchor_point: Tensor  # (D,) control-variate anchor θ_a
    anchor_grad: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)
    anchor_rows: Tensor  # () int64: rows seen when the anchor was set; 0 = no anchor yet
    # () int64: rows seen at the last re-estimate over all rows (``restart``); 0 = none. States
    # stored before the field existed load with the default.
    restart_rows: Tensor = torch.zeros((), dtype=torch.int64)
    # () int64: rows seen when a chunk first left the particles astray (``astray``) since then;
    # 0 = none
    astray_rows: Tensor = torch.zeros((), dtype=torch.int64)
    # The Eves the next piece's genealogy starts from (``smc.genealogy.Eves``): after a piece
    # that ended with the selection back to M particles (``ChunkLoop.narrow``), the particles it
    # drew from; after any other piece, the particles themselves. Written after every piece at
    # the fixed length M, so that ``islands`` can stack them. Empty: the particles themselves
    # (a state not yet updated, or stored before the fields existed).
    eves: Tensor = torch.zeros(0, dtype=torch.int64)  # (M,) each particle's Eve
    eve_weights: Tensor = torch.zeros(0, dtype=torch.float64)  # (M,) W⁰_e; 0 past the last Eve
    lost_eves: Tensor = torch.zeros((), dtype=torch.float64)  # () Σ W⁰_e² of Eves left no copy


class ChunkLoop(NamedTuple):
    """What an online method brings to the chunk loop."""

    model: Model
    past: PastDataSettings  # how the past is read: batch_size, control variates and anchors
    full_batch_rows: int
    parts: Parts  # the method's tempered-SMC parts for one piece
    max_steps: int  # annealing steps per piece; a safeguard
    # "genealogy": a piece's variance from its particles' Eve groups (``smc.genealogy``);
    # "delta": the sum of its steps' delta-method variances
    standard_error: str = "genealogy"
    surprise: Surprise | None = None  # more rejuvenation after a surprising piece (``surprise``)
    # the parts of a piece's steps past ``surprise.steps`` (``piece_parts``); None: ``parts``
    careful_parts: Parts | None = None
    # the careful parts' first selection, to more particles, and the one back at the piece's end
    widen: Selection | None = None
    narrow: Selection | None = None
    # re-estimates from the prior over the rows seen, shuffled (``restart``), and the prior
    # state they start from; None: never
    restart: Restart | None = None
    fresh: Callable[[torch.Generator], ParticleState] | None = None


def eve_fields(eves: Eves) -> dict[str, Tensor]:
    """``eves`` as the state's fields: their weights padded with zeros to one per particle."""
    count = eves.labels.shape[0]
    weights = torch.zeros(count, dtype=eves.weights.dtype, device=eves.weights.device)
    weights[: eves.weights.shape[0]] = eves.weights
    return {
        "eves": eves.labels,
        "eve_weights": weights,
        "lost_eves": torch.tensor(eves.lost, dtype=weights.dtype, device=weights.device),
    }
