"""An online particle method as an ``Estimator``: the chunk update its assembly makes of the
piece kernel and extensions (``sgais``, ``sequential``, ``minibatch_mh``, ``hybrid``), reported
as the method's Info record."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.estimator import (
    Estimator,
    Update,
    lognormal_log_evidence,
    weighted_particles,
)
from modelcompare.estimators.online import state as particle_state
from modelcompare.estimators.online.kernel import ChunkUpdate
from modelcompare.estimators.online.reports import ChunkReport
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.settings import ParticleSettings
from modelcompare.models import Model

InfoT = TypeVar("InfoT")
# (rows of the chunk, the state after it, what it did) -> the method's Info record
Report = Callable[[int, ParticleState, ChunkReport], InfoT]


def reported(chunk_update: ChunkUpdate, report: Report[InfoT]) -> Update[ParticleState, InfoT]:
    def update(
        state: ParticleState,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[ParticleState, InfoT]:
        new_state, chunk_report = chunk_update(state, chunk, history, generator, deadline)
        return new_state, report(chunk.count, new_state, chunk_report)

    return update


def online_estimator(
    method: str,
    model: Model,
    settings: ParticleSettings,
    chunk_update: ChunkUpdate,
    report: Report[InfoT],
) -> Estimator[ParticleState, InfoT]:
    """The ``Estimator`` of an online particle method: it reports log Ẑ + σ̂²/2
    (``lognormal_log_evidence``)."""
    return weighted_particles(
        method,
        model,
        settings,
        ParticleState,
        settings.particles,
        functools.partial(particle_state.init, model, settings),
        reported(chunk_update, report),
        log_evidence=lognormal_log_evidence,
    )
