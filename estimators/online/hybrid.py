"""Hybrid: nested sampling on the first rows, SG-AIS on the rest of the stream.

The first rows move the posterior most (design doc: they carry most of SG-AIS's error), and a
batch method is cheap while the data is small. So the first ``nested_rows`` rows are absorbed by
nested sampling — re-run on all of them at each update until they are complete — and SG-AIS then
starts from the nested posterior samples, resampled to ``particles`` equal-weight points, with
the nested log Ẑ and its variance as its running totals.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from modelcompare.estimators.data.history import ExtendedHistory, History, Rows
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.estimator import Estimator, Update, weighted_particles
from modelcompare.estimators.online import sgais
from modelcompare.estimators.online.assembly import reported
from modelcompare.estimators.online.settings import HybridSettings
from modelcompare.estimators.online.sgais import SGAISInfo
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.references.batch import all_rows, equal_weight_samples
from modelcompare.estimators.references.nested import run_nested
from modelcompare.estimators.smc.weights import ess as kish_ess
from modelcompare.models import Model


@dataclass(frozen=True)
class HybridInfo:
    rows: int
    log_evidence_increment: float
    log_evidence_increment_variance: float
    delta_method_variance: float  # of the nested run, or SG-AIS's sum of per-step variances
    ess: float  # of the particle weights after the update
    min_ess: float  # smallest ESS: of the nested run's weights, or reached during annealing
    nested_iterations: int  # dead points of the nested re-run (0 once SG-AIS has taken over)
    annealing_steps: int
    resamples: int
    sub_chunks: int
    reanchors: int
    surprises: int
    acceptance_rate: float  # of the SG-AIS moves, or of the nested run's constrained moves
    diverged_fraction: float  # of SG-AIS's SGHMC trajectories (``SGAISInfo``); NaN when nested
    reestimated: bool  # SG-AIS re-estimated log Z over every row seen (``SGAISInfo``)
    spread: float  # the cloud's width in units of the posterior's (``SGAISInfo``); NaN when nested


def from_sgais(info: SGAISInfo) -> HybridInfo:
    return HybridInfo(nested_iterations=0, **info.__dict__)


def nested_update(
    model: Model,
    settings: HybridSettings,
    state: ParticleState,
    head: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None,
) -> tuple[ParticleState, HybridInfo]:
    """Nested sampling re-run on every row so far (all within the first ``nested_rows``)."""
    rows = all_rows(history, head)
    result = run_nested(model, rows, settings.nested, generator, deadline)
    samples, log_weights = equal_weight_samples(
        result.particles, result.log_weights, settings.particles, generator
    )
    variance = result.log_evidence_stderr**2
    device = state.log_evidence.device
    new_state = state._replace(
        particles=samples,
        log_weights=log_weights,
        log_evidence=torch.tensor(result.log_evidence, dtype=torch.float64, device=device),
        log_evidence_variance=torch.tensor(variance, dtype=torch.float64, device=device),
        n_observations=state.n_observations + head.count,
    )
    info = HybridInfo(
        rows=head.count,
        log_evidence_increment=result.log_evidence - float(state.log_evidence),
        # A re-run is independent of the previous run: the difference carries both variances.
        log_evidence_increment_variance=variance + float(state.log_evidence_variance),
        delta_method_variance=variance + float(state.log_evidence_variance),
        ess=float(settings.particles),
        min_ess=kish_ess(result.log_weights),
        nested_iterations=result.iterations,
        annealing_steps=0,
        resamples=0,
        sub_chunks=1,
        reanchors=0,
        surprises=0,
        acceptance_rate=result.acceptance_rate,
        diverged_fraction=math.nan,
        reestimated=False,
        spread=math.nan,
    )
    return new_state, info


def update(
    model: Model,
    settings: HybridSettings,
    sgais_update: Update[ParticleState, SGAISInfo],
    state: ParticleState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> tuple[ParticleState, HybridInfo]:
    n = int(state.n_observations)
    if len(history) != n:
        raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
    if n >= settings.nested_rows:
        new_state, info = sgais_update(state, chunk, history, generator, deadline)
        return new_state, from_sgais(info)
    head_rows = min(chunk.count, settings.nested_rows - n)
    head, tail = chunk.slice(0, head_rows), chunk.slice(head_rows, chunk.count)
    nested_state, nested = nested_update(model, settings, state, head, history, generator, deadline)
    if tail.count == 0:
        return nested_state, nested
    seen = ExtendedHistory(history, head)
    final, later = sgais_update(nested_state, tail, seen, generator, deadline)
    return final, HybridInfo(
        rows=chunk.count,
        log_evidence_increment=nested.log_evidence_increment + later.log_evidence_increment,
        log_evidence_increment_variance=nested.log_evidence_increment_variance
        + later.log_evidence_increment_variance,
        delta_method_variance=nested.delta_method_variance + later.delta_method_variance,
        ess=later.ess,
        min_ess=min(nested.min_ess, later.min_ess),
        nested_iterations=nested.nested_iterations,
        annealing_steps=later.annealing_steps,
        resamples=later.resamples,
        sub_chunks=1 + later.sub_chunks,
        reanchors=later.reanchors,
        surprises=later.surprises,
        acceptance_rate=later.acceptance_rate,
        diverged_fraction=later.diverged_fraction,
        reestimated=later.reestimated,
        spread=later.spread,
    )


def bind(model: Model, settings: HybridSettings) -> Estimator[ParticleState, HybridInfo]:
    sgais_update = reported(sgais.chunk_update(model, settings), sgais.annealing_info)
    return weighted_particles(
        "hybrid",
        model,
        settings,
        ParticleState,
        max(settings.particles, settings.live_points),  # the nested phase holds live points
        functools.partial(init, model, settings),
        functools.partial(update, model, settings, sgais_update),
    )
