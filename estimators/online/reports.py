"""What the pieces of a chunk did, and what a chunk's reports say about the particles: the
SGHMC trajectories undone as diverged, the Metropolis acceptance, the annealing steps of the
exact phase, whether they went astray."""

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
    seen: int = 0  # the rows of the stream before the piece
    started: bool = False  # annealed in from a Gaussian start (``gaussian_start``)


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


def exact_phase_steps(reports: tuple[PieceReport, ...], full_batch_rows: int) -> int:
    """The annealing steps of the pieces that were absorbed while the past was used in full
    (``full_batch_rows``) and annealed from the posterior before them: a Gaussian start's few
    steps measure how close its Gaussian was, not a path."""
    return sum(len(report.steps) for report in reports
               if report.seen <= full_batch_rows and not report.started)


def astray(reports: tuple[PieceReport, ...], spread: float, exact_steps: int) -> bool:
    """Whether a chunk (or a re-estimate) left the particle system broken: more than
    ``DIVERGED`` of its SGHMC trajectories undone as diverged, its cloud frozen (``spread``
    below ``FROZEN``) or wide (above ``WIDE``; NaN where not measured), or a piece annealed in
    more steps than the whole exact phase took from the prior to the posterior of its rows
    (``exact_steps``; 0 where not known). Such a piece moved the particles farther than learning
    from nothing did, and a cloud carried along that path can end tens of nats off with no
    diverged move and a spread that looks healthy (sorted mixtures, drifting streams); a
    re-estimate from the prior then costs no longer a ladder than the piece. A merely surprising
    piece is not a sign: an i.i.d. stream's pieces just after the exact phase take ladders a few
    times the later ones', still a fraction of the exact phase's, and the extra moves that follow
    one (``surprise``) are the answer to it (docs/design/re-estimates.md)."""
    longest = max((len(report.steps) for report in reports), default=0)
    return (
        diverged_fraction(reports) > DIVERGED
        or spread < FROZEN
        or spread > WIDE
        or 0 < exact_steps < longest
    )
