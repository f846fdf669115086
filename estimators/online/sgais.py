"""Stochastic-gradient annealed importance sampling (SG-AIS) over a data stream.

Each piece of a chunk is annealed in with temperatures 0 = λ_0 < … < λ_T = 1 chosen by
conditional-ESS bisection; log p(piece | past) is the sum over steps of log Σ_i W_i p(piece|θ_i)^Δ
(SMC, Del Moral et al. 2006, eq. 14), so log Z is always a sum of per-step increments of
normalised weights. Particles are resampled when their ESS falls below a threshold and moved by
exact HMC while the past is small, by SGHMC on minibatches of the past after (``kernels``).
Chunks larger than the schedule allows are split (``data.schedule``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.assembly import online_estimator
from modelcompare.estimators.online.careful import Careful, narrowing, step_rule
from modelcompare.estimators.online.dimension import scaled_to_dimension
from modelcompare.estimators.online.gaussian_start import reference_mass
from modelcompare.estimators.online.islands import averaged, islands
from modelcompare.estimators.online.kernel import ChunkUpdate, PieceKernel, absorb
from modelcompare.estimators.online.kernels import sghmc_moves
from modelcompare.estimators.online.reestimate import reestimating
from modelcompare.estimators.online.reports import ChunkReport, accepted_fraction, diverged_fraction
from modelcompare.estimators.online.scores import past_score
from modelcompare.estimators.online.settings import AnnealingSettings, SGAISSettings
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.online.surprise import surprise_moves
from modelcompare.estimators.online.target import Piece
from modelcompare.estimators.smc.control_variates import MIN_PARTICLES_PER_CONTROL
from modelcompare.estimators.smc.mass import MassRule, mass_rule, particle_mass
from modelcompare.estimators.smc.relabeling import Relabel, relabeler
from modelcompare.estimators.smc.resampling import RESAMPLERS, resample_below
from modelcompare.estimators.smc.temperature import adaptive
from modelcompare.estimators.smc.tempered import Control, Move, TemperedSMC
from modelcompare.estimators.smc.weights import ess as kish_ess
from modelcompare.models import Model


@dataclass(frozen=True)
class SGAISInfo:
    """What one SG-AIS update did. ``log_evidence_increment`` is log p̂(chunk | past)."""

    rows: int
    log_evidence_increment: float
    log_evidence_increment_variance: float
    delta_method_variance: float  # the sum of the annealing steps' delta-method variances
    ess: float  # of the particle weights after the update
    min_ess: float  # smallest ESS reached during annealing, before any resampling
    annealing_steps: int
    resamples: int
    sub_chunks: int  # schedule-sized pieces the chunk was cut into
    reanchors: int  # control-variate anchors (re)set
    surprises: int  # pieces followed by surprise moves (``surprise``)
    acceptance_rate: float  # mean Metropolis acceptance of the tested moves (NaN if none)
    # fraction of the moves undone as diverged (SGHMC trajectories, and any move into the far
    # tails: ``smc.tempered.settled``; NaN where the moves are exact and none was): near 0 on
    # healthy streams; a large one means the moves are not moving the particles, and log Z and its
    # standard error are not to be trusted (benchmarks/README.md, "sorted mixture")
    diverged_fraction: float
    # log Z was estimated again from the prior over every row seen, shuffled (``reestimate``):
    # ``log_evidence_increment`` is then that of the chunk's in-order pass, not log Z's change
    reestimated: bool
    # the cloud's width in units of the posterior's (``spread``): about 1 while it follows the
    # posterior, below ``spread.FROZEN`` once it has collapsed, above ``spread.WIDE`` once it no
    # longer follows the posterior. NaN where not measured: while the
    # moves are exact, and where no re-estimate can come (off, or n past ``reestimate_max_rows``)
    # on updates that cross no multiple of 2,000 rows
    spread: float


def annealing_info(rows: int, state: ParticleState, chunk: ChunkReport) -> SGAISInfo:
    reports = chunk.pieces
    steps = [info for report in reports for info in report.steps]
    return SGAISInfo(
        rows=rows,
        log_evidence_increment=sum(r.log_evidence_increment for r in reports),
        log_evidence_increment_variance=sum(r.log_evidence_increment_variance for r in reports),
        delta_method_variance=sum(r.delta_method_variance for r in reports),
        ess=kish_ess(state.log_weights),
        min_ess=min((info.ess for info in steps), default=math.inf),
        annealing_steps=len(steps),
        resamples=sum(info.resampled for info in steps),
        sub_chunks=len(reports),
        reanchors=sum(r.reanchored for r in reports),
        surprises=sum(r.extra_moves for r in reports),
        acceptance_rate=accepted_fraction(reports),
        diverged_fraction=diverged_fraction(reports),
        reestimated=chunk.reestimated,
        spread=chunk.spread,
    )


def annealed(
    settings: AnnealingSettings,
    relabel: Relabel | None,
    piece: Piece,
    move: Move,
    control: Control | None = None,
    mass: MassRule = particle_mass,
) -> TemperedSMC:
    """SG-AIS's ladder for one piece: adaptive temperatures, ESS-triggered resampling,
    ``control`` variates of the first step's increment (if any) and the moves' ``mass`` rule."""
    return TemperedSMC(
        log_likelihood=piece.log_likelihood,
        temperature_rule=adaptive(settings.ess_target),
        selection=resample_below(settings.resample_threshold, RESAMPLERS[settings.resampling]),
        move=move,
        relabel=relabel,
        control=control,
        mass=mass,
    )


def controlled(settings: SGAISSettings, model: Model) -> bool:
    """Whether the first step's increment takes the score's control variates: asked for, and
    enough particles to fit one coefficient per parameter (``MIN_PARTICLES_PER_CONTROL``)."""
    return (
        settings.increment_control == "score"
        and settings.particles >= MIN_PARTICLES_PER_CONTROL * (model.param_dim + 1)
    )


def parts(settings: SGAISSettings, relabel: Relabel | None, piece: Piece) -> TemperedSMC:
    """SG-AIS's parts for ``piece``; past the exact phase the SGHMC mass pools
    ``mass_clouds`` clouds (exact HMC is Metropolis-tested: its mass only sets its pace), and
    from a Gaussian start it is the start's covariance."""
    control = past_score(piece) if controlled(settings, piece.model) else None
    mass = particle_mass if piece.past_in_full else mass_rule(settings.mass_clouds)
    if piece.reference is not None:
        mass = reference_mass(piece.reference)
    return annealed(settings, relabel, piece, sghmc_moves(settings, piece), control, mass)


def kernel(model: Model, settings: SGAISSettings) -> PieceKernel:
    """The piece kernel with SG-AIS's parts, the careful ladder, the surprise moves (their
    triggers and moves scaled to the model's size: ``dimension``) and the stream's start: from
    the prior, or from a Gaussian on its first rows up to ``full_batch_rows`` (never for a
    label-symmetric model, whose posterior has a copy of every mode per labelling)."""
    settings = scaled_to_dimension(settings, model.param_dim)
    relabel = relabeler(model)
    careful = Careful(
        settings.careful_steps,
        functools.partial(parts, settings.careful, relabel),
        settings.careful_particles,
        RESAMPLERS[settings.resampling],
    )
    after = (narrowing(careful),) if settings.careful_particles > 1 else ()
    return PieceKernel(
        model=model,
        past=settings,
        full_batch_rows=settings.full_batch_rows,
        parts=functools.partial(parts, settings, relabel),
        max_steps=settings.max_annealing_steps,
        variance=standard_error.RULES[settings.standard_error],
        step_rule=step_rule(careful),
        after=after + surprise_moves(settings),
        start_rows=start_rows(settings.full_batch_rows) if laplace_start(settings, relabel) else 0,
    )


def start_rows(full_batch_rows: int) -> int:
    """The rows a Gaussian start covers at most: a quarter of the exact phase's (rounded up),
    so that the phase always anneals its rows from the start's posterior to that of
    ``full_batch_rows`` rows, a fourfold growth of n, and its ladders measure how far a later
    piece may carry the particles before they count as astray (``reports.astray``). A start
    that covered the whole phase left that measure to the few steps of the next piece, and every
    later piece longer than them re-estimated (docs/design/gaussian-start.md)."""
    return -(-full_batch_rows // 4)


def laplace_start(settings: SGAISSettings, relabel: Relabel | None) -> bool:
    """Whether a stream starts from a Gaussian (``gaussian_start``): asked for, on a model
    whose posterior is not label-symmetric, with a first piece of at least one row."""
    return settings.start == "laplace" and relabel is None and settings.full_batch_rows > 0


def chunk_update(model: Model, settings: SGAISSettings) -> ChunkUpdate:
    """The kernel's chunks, re-estimated where due (``reestimate``)."""
    pieces = kernel(model, settings)
    fresh = functools.partial(init, model, settings)
    return reestimating(pieces, settings, fresh, functools.partial(absorb, pieces))


def islands_info(
    infos: list[SGAISInfo], before: ParticleState, after: ParticleState
) -> SGAISInfo:
    """One update of ``islands``: log Z's and its variance's changes as the islands report them
    together, their work summed, the worst of their signs (most diverged, least spread)."""
    log_z, variance = averaged(after.log_evidence, after.log_evidence_variance)
    log_z_before, variance_before = averaged(before.log_evidence, before.log_evidence_variance)
    shares = torch.softmax(after.log_evidence, 0) ** 2
    measured = [i.spread for i in infos if not math.isnan(i.spread)]
    diverged = [i.diverged_fraction for i in infos if not math.isnan(i.diverged_fraction)]
    accepted = [i.acceptance_rate for i in infos if not math.isnan(i.acceptance_rate)]
    return SGAISInfo(
        rows=infos[0].rows,
        log_evidence_increment=log_z - log_z_before,
        log_evidence_increment_variance=variance - variance_before,
        delta_method_variance=sum(
            float(share) * i.delta_method_variance for share, i in zip(shares, infos, strict=True)
        ),
        ess=kish_ess(after.log_weights),
        min_ess=min(i.min_ess for i in infos),
        annealing_steps=sum(i.annealing_steps for i in infos),
        resamples=sum(i.resamples for i in infos),
        sub_chunks=infos[0].sub_chunks,
        reanchors=sum(i.reanchors for i in infos),
        surprises=sum(i.surprises for i in infos),
        acceptance_rate=sum(accepted) / len(accepted) if accepted else math.nan,
        diverged_fraction=max(diverged, default=math.nan),
        reestimated=any(i.reestimated for i in infos),
        spread=min(measured, default=math.nan),
    )


def bind(model: Model, settings: SGAISSettings) -> Estimator[ParticleState, SGAISInfo]:
    system = online_estimator(
        "sgais", model, settings, chunk_update(model, settings), annealing_info
    )
    return islands(system, settings.islands, islands_info)
