"""What the pieces of a chunk did, and what a chunk's reports say about the particles: the
SGHMC trajectories undone as diverged, the Metropolis acceptance, whether they went astray."""

from __future__ import annotations

import math
from typing import NamedTuple

from modelcompare.estimators.online.spread import FROZEN, WIDE
from modelcompare.estimators.smc.tempered import StepInfo

# an update that undid more than this fraction of its SGHMC trajectories as diverged is astray
# (the service flags such a model: MODELCOMPARE_DIVERGED_WARNING_FRACTION, the same default)
DIVERGED = 0.1


class PieceReport(NamedTuple):
    log_evidence_increment: float  # log p̂(piece | past): the sum of its steps' increments
    log_evidence_increment_variance: float  # by the kernel's variance rule (``standard_error``)
    steps: tuple[StepInfo, ...]
    reanchored: bool
    delta_method_variance: float  # the sum of the steps' delta-method variances
    extra_moves: bool = False  # the particles were moved again after the annealing (``surprise``)


class ChunkReport(NamedTuple):
    pieces: tuple[PieceReport, ...]
    reestimated: bool  # log Z was estimated again over every row seen (``reestimate``)
    # the cloud's width in units of the posterior's after the chunk (``spread``): about 1 while
    # it follows the posterior; NaN where not measured (``kernel.absorb``)
    spread: float


def diverged_fraction(reports: tuple[PieceReport, ...]) -> float:
    """Mean fraction of the moves undone as diverged over a chunk's steps (NaN where none
    reports one: exact moves that undid nothing)."""
    fractions = [
        info.diverged for report in reports for info in report.steps if info.diverged is not None
    ]
    return sum(fractions) / len(fractions) if fractions else math.nan


def accepted_fraction(reports: tuple[PieceReport, ...]) -> float:
    """Mean acceptance over every Metropolis-tested transition of a chunk (NaN if none)."""
    rates = [rate for report in reports for info in report.steps for rate in info.acceptance]
    return sum(rates) / len(rates) if rates else math.nan


def astray(reports: tuple[PieceReport, ...], spread: float) -> bool:
    """Whether a chunk (or a re-estimate) left the particle system broken: more than
    ``DIVERGED`` of its SGHMC trajectories undone as diverged, or its cloud frozen (``spread``
    below ``FROZEN``) or wide (above ``WIDE``; NaN where not measured). A surprising piece
    alone is not a sign: an i.i.d. stream's pieces just after the exact phase take long
    ladders too, and the extra moves that follow one (``surprise``) are the answer to it
    (docs/design/re-estimates.md)."""
    return diverged_fraction(reports) > DIVERGED or spread < FROZEN or spread > WIDE
