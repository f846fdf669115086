"""Sequential SGHMC: no annealing and no reweighting carried over.

log p(piece | past) ≈ log (1/M) Σ_i p(piece | θ_i) with the particles as they stand; then the
weights are dropped and the moves alone carry the particles onto the new posterior: the tempered
step with the all-at-once temperature rule and no resampling. This is the plain predictive
average users compare against: it is biased when a piece is informative relative to the particle
cloud, which is what annealing and resampling in ``sgais`` repair.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.assembly import online_estimator
from modelcompare.estimators.online.kernel import PieceKernel, absorb
from modelcompare.estimators.online.kernels import sghmc_moves
from modelcompare.estimators.online.reports import ChunkReport, accepted_fraction, diverged_fraction
from modelcompare.estimators.online.settings import SequentialSettings
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.online.target import Piece
from modelcompare.estimators.smc.relabeling import Relabel, relabeler
from modelcompare.estimators.smc.resampling import drop_weights
from modelcompare.estimators.smc.temperature import all_at_once
from modelcompare.estimators.smc.tempered import TemperedSMC
from modelcompare.models import Model


@dataclass(frozen=True)
class SequentialInfo:
    """What one sequential update did. ``log_evidence_increment`` is log p̂(chunk | past)."""

    rows: int
    log_evidence_increment: float
    log_evidence_increment_variance: float
    min_ess: float  # smallest ESS of a predictive average's weights, before they were dropped
    sub_chunks: int
    reanchors: int
    acceptance_rate: float  # of the exact HMC moves (NaN after the exact phase, unless barker)
    diverged_fraction: float  # of the SGHMC trajectories, undone (NaN if none ran: ``SGAISInfo``)
    spread: float  # the cloud's width in units of the posterior's (``SGAISInfo``)


def sequential_info(rows: int, state: ParticleState, chunk: ChunkReport) -> SequentialInfo:
    reports = chunk.pieces
    steps = [info for report in reports for info in report.steps]
    return SequentialInfo(
        rows=rows,
        log_evidence_increment=sum(r.log_evidence_increment for r in reports),
        log_evidence_increment_variance=sum(r.log_evidence_increment_variance for r in reports),
        min_ess=min((info.ess for info in steps), default=math.inf),
        sub_chunks=len(reports),
        reanchors=sum(r.reanchored for r in reports),
        acceptance_rate=accepted_fraction(reports),
        diverged_fraction=diverged_fraction(reports),
        spread=chunk.spread,
    )


def parts(settings: SequentialSettings, relabel: Relabel | None, piece: Piece) -> TemperedSMC:
    return TemperedSMC(
        log_likelihood=piece.log_likelihood,
        temperature_rule=all_at_once,
        selection=drop_weights,
        move=sghmc_moves(settings, piece),
        relabel=relabel,
    )


def bind(model: Model, settings: SequentialSettings) -> Estimator[ParticleState, SequentialInfo]:
    kernel = PieceKernel(
        model=model,
        past=settings,
        full_batch_rows=settings.full_batch_rows,
        parts=functools.partial(parts, settings, relabeler(model)),
        max_steps=1,
        variance=standard_error.genealogy,
    )
    update = functools.partial(absorb, kernel)
    return online_estimator("sequential", model, settings, update, sequential_info)
