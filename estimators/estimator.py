"""The binding of a model to an estimator method: a frozen record of pure functions over explicit,
immutable state (``init`` + ``update`` returning ``(State, Info)``, as in BlackJAX), built by
``modelcompare.estimators.build``. The library (``OnlineEvidence``), the service's workers and the
API's validation all hold one of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, OnDevice, Rows
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.data.serialization import state_from_bytes
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.settings import Settings
from modelcompare.estimators.smc.weights import ess as kish_ess
from modelcompare.models import Model, Prediction

StateT = TypeVar("StateT")
InfoT = TypeVar("InfoT")


class Update(Protocol[StateT, InfoT]):
    def __call__(
        self,
        state: StateT,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[StateT, InfoT]:
        """Absorb ``chunk``; ``history`` holds exactly the rows seen before it. Raises
        ``EstimatorError`` (``BudgetExceeded`` past the deadline) and leaves ``state`` as it was."""
        ...


@dataclass(frozen=True)
class Estimator(Generic[StateT, InfoT]):
    method: str
    model: Model
    settings: Settings
    state_type: type[StateT]
    particles: int  # largest point cloud an update holds (particles, live points); 0: closed form
    init: Callable[[torch.Generator], StateT]
    update: Update[StateT, InfoT]
    log_evidence: Callable[[StateT], float]
    log_evidence_variance: Callable[[StateT], float]
    n_observations: Callable[[StateT], int]
    ess: Callable[[StateT], float]  # of the state's particle weights (NaN without particles)
    predict: Callable[[StateT, Tensor | None], Prediction]  # at the model's view of rows x

    @property
    def device(self) -> torch.device:
        return self.settings.torch_device

    def generator(self, *parts: object) -> torch.Generator:
        """The update's randomness, seeded from ``parts`` (seed, model name, sequence)."""
        return derive_generator(*parts, device=self.device)

    def load(self, data: bytes) -> StateT:
        """A state from ``state_to_bytes`` output, on this estimator's device."""
        return state_from_bytes(self.state_type, data, self.device)


def on_device(update: Update[StateT, InfoT], device: torch.device) -> Update[StateT, InfoT]:
    """``update`` reading the chunk and the history on ``device``. Data live on the CPU (the
    library's and the service's histories do), so an estimator on the CPU reads them as they
    are, without a per-read hop."""
    if device.type == "cpu":
        return update

    def moved(
        state: StateT,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[StateT, InfoT]:
        return update(state, chunk.to(device), OnDevice(history, device), generator, deadline)

    return moved


def weighted_particles(
    method: str,
    model: Model,
    settings: Settings,
    state_type: type[StateT],
    particles: int,
    init: Callable[[torch.Generator], StateT],
    update: Update[StateT, InfoT],
    log_evidence: Callable[[StateT], float] | None = None,
) -> Estimator[StateT, InfoT]:
    """An ``Estimator`` whose state has ``particles``, normalised ``log_weights`` and running
    ``log_evidence``, ``log_evidence_variance`` and ``n_observations`` fields; it reports the
    state's ``log_evidence`` as it is unless ``log_evidence`` says otherwise."""

    def predict(state: Any, x: Tensor | None) -> Prediction:
        x = None if x is None else x.to(state.particles.device)
        return model.predict(state.particles, state.log_weights, x)

    return Estimator(
        method=method,
        model=model,
        settings=settings,
        state_type=state_type,
        particles=particles,
        init=init,
        update=on_device(update, settings.torch_device),
        log_evidence=log_evidence or _log_evidence,
        log_evidence_variance=_log_evidence_variance,
        n_observations=_n_observations,
        ess=_ess,
        predict=predict,
    )


def _log_evidence(state: Any) -> float:
    return float(state.log_evidence)


def lognormal_log_evidence(state: Any) -> float:
    """log Ẑ + σ̂²/2: an unbiased Ẑ (E Ẑ = Z) has a log Ẑ that is asymptotically N(log Z − σ²/2,
    σ²) (Bérard, Del Moral & Doucet 2014, Thm. 1.1), so adding half the estimated variance removes
    the −σ²/2 that reads log Z low by about half a nat at σ = 1."""
    return float(state.log_evidence) + 0.5 * float(state.log_evidence_variance)


def _log_evidence_variance(state: Any) -> float:
    return float(state.log_evidence_variance)


def _n_observations(state: Any) -> int:
    return int(state.n_observations)


def _ess(state: Any) -> float:
    return kish_ess(state.log_weights)
