"""Exact evidence for conjugate models: the state is the closed-form posterior (the model's
``closed_form()``); history is not needed."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.errors import EstimatorConfigError
from modelcompare.estimators.estimator import Estimator, on_device
from modelcompare.estimators.online.settings import ExactSettings
from modelcompare.models import ConjugateModel, Model, Prediction


class ExactState(NamedTuple):
    stats: Tensor  # the model's sufficient statistics, flattened in ``prior_stats`` order
    log_evidence: Tensor  # ()
    n_observations: Tensor  # () int64


@dataclass(frozen=True)
class ExactInfo:
    rows: int
    log_evidence_increment: float  # log p(chunk | past), exactly


class StatsLayout:
    """The shapes of a conjugate model's statistics: dict of tensors <-> one flat tensor."""

    def __init__(self, prior: dict[str, Tensor]) -> None:
        self.shapes = {name: value.shape for name, value in prior.items()}

    def flatten(self, stats: dict[str, Tensor]) -> Tensor:
        return torch.cat([stats[name].reshape(-1) for name in self.shapes])

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        out, start = {}, 0
        for name, shape in self.shapes.items():
            size = shape.numel()
            out[name] = flat[start : start + size].reshape(shape)
            start += size
        return out


def init(
    oracle: ConjugateModel, layout: StatsLayout, device: torch.device, generator: torch.Generator
) -> ExactState:
    prior = {name: value.to(device) for name, value in oracle.prior_stats().items()}
    return ExactState(
        stats=layout.flatten(prior),
        log_evidence=torch.zeros((), dtype=torch.float64, device=device),
        n_observations=torch.zeros((), dtype=torch.int64, device=device),
    )


def update(
    oracle: ConjugateModel,
    layout: StatsLayout,
    state: ExactState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> tuple[ExactState, ExactInfo]:
    stats = layout.unflatten(state.stats)
    increment = oracle.log_predictive(stats, chunk.x, chunk.y)
    new_state = ExactState(
        stats=layout.flatten(oracle.update_stats(stats, chunk.x, chunk.y)),
        log_evidence=state.log_evidence + increment,
        n_observations=state.n_observations + chunk.count,
    )
    return new_state, ExactInfo(chunk.count, float(increment))


def bind(model: Model, settings: ExactSettings) -> Estimator[ExactState, ExactInfo]:
    oracle = model.closed_form()
    if oracle is None:
        raise EstimatorConfigError(
            f"{model.family} has no closed-form evidence; use method='sgais'"
        )
    layout = StatsLayout(oracle.prior_stats())

    def predict(state: ExactState, x: Tensor | None) -> Prediction:
        x = None if x is None else x.to(state.stats.device)
        return oracle.predict_from_stats(layout.unflatten(state.stats), x)

    return Estimator(
        method="exact",
        model=model,
        settings=settings,
        state_type=ExactState,
        particles=0,
        init=functools.partial(init, oracle, layout, settings.torch_device),
        update=on_device(functools.partial(update, oracle, layout), settings.torch_device),
        log_evidence=lambda state: float(state.log_evidence),
        log_evidence_variance=lambda state: 0.0,
        n_observations=lambda state: int(state.n_observations),
        ess=lambda state: math.nan,
        predict=predict,
    )
