"""Exact evidence for conjugate models: the state is the closed-form posterior."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from estimators.base import Info
from estimators.history import History, Rows
from models import ConjugateModel, Model, Prediction


class ExactState(NamedTuple):
    stats: Tensor  # the model's sufficient statistics, flattened in ``stat_names`` order
    log_evidence: Tensor  # ()
    n_observations: Tensor  # () int64


class Exact:
    """Closed-form log p(chunk | past) for a ``ConjugateModel``; history is not needed."""

    state_type = ExactState

    def __init__(self, model: Model) -> None:
        if not isinstance(model, ConjugateModel):
            raise TypeError(f"{model.family} has no closed-form evidence; use method='sgais'")
        self.model: ConjugateModel = model
        prior = model.prior_stats()
        self._shapes = {name: value.shape for name, value in prior.items()}

    def _flatten(self, stats: dict[str, Tensor]) -> Tensor:
        return torch.cat([stats[name].reshape(-1) for name in self._shapes])

    def _unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        out, start = {}, 0
        for name, shape in self._shapes.items():
            size = shape.numel()
            out[name] = flat[start : start + size].reshape(shape)
            start += size
        return out

    def init(self, generator: torch.Generator) -> ExactState:
        return ExactState(
            stats=self._flatten(self.model.prior_stats()),
            log_evidence=torch.zeros((), dtype=torch.float64),
            n_observations=torch.zeros((), dtype=torch.int64),
        )

    def log_evidence(self, state: ExactState) -> float:
        return float(state.log_evidence)

    def log_evidence_variance(self, state: ExactState) -> float:
        return 0.0

    def n_observations(self, state: ExactState) -> int:
        return int(state.n_observations)

    def ess(self, state: ExactState) -> float:
        return float("nan")

    def predict(self, state: ExactState, x: Tensor | None) -> Prediction:
        return self.model.predict_from_stats(self._unflatten(state.stats), x)

    def posterior_stats(self, state: ExactState) -> dict[str, Tensor]:
        return self._unflatten(state.stats)

    def update(
        self, state: ExactState, chunk: Rows, history: History, generator: torch.Generator
    ) -> tuple[ExactState, Info]:
        stats = self._unflatten(state.stats)
        increment = self.model.log_predictive(stats, chunk.x, chunk.y)
        new_state = ExactState(
            stats=self._flatten(self.model.update_stats(stats, chunk.x, chunk.y)),
            log_evidence=state.log_evidence + increment,
            n_observations=state.n_observations + chunk.count,
        )
        info = Info(
            rows=chunk.count,
            log_evidence_increment=float(increment),
            log_evidence_increment_variance=0.0,
            ess=float("nan"),
            min_ess=float("nan"),
            annealing_steps=0,
            resamples=0,
            sub_chunks=1,
            reanchors=0,
        )
        return new_state, info
