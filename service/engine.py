"""The one place the service calls the engine: build, init, update and summarise one model."""

from __future__ import annotations

import math
from typing import Any

import torch

from estimators import ColumnView, History, Info, Rows, build_estimator, state_from_bytes
from estimators.history import select_columns
from estimators.rng import derive_generator
from models import Prediction
from service.schemas import ComparisonSpec, ModelSpec


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity: report those as null."""
    return value if math.isfinite(value) else None


class Runner:
    """A model of a comparison with its estimator, reading its columns of the shared rows."""

    def __init__(self, comparison: ComparisonSpec, spec: ModelSpec) -> None:
        self.name = spec.name
        self.seed = comparison.seed
        self.model = spec.build()
        settings = {k: v for k, v in comparison.estimator.items() if k != "method"}
        self.estimator = build_estimator(comparison.estimator["method"], self.model, **settings)
        self.columns = spec.columns if self.model.input_dim > 0 else None
        self._column_index = None if self.columns is None else torch.tensor(self.columns)

    def init_state(self) -> Any:
        return self.estimator.init(derive_generator(self.seed, self.name, "init"))

    def load(self, data: bytes) -> Any:
        return state_from_bytes(self.estimator.state_type, data)

    def select(self, rows: Rows) -> Rows:
        """This model's columns of x (none for a model without inputs); y as given."""
        return select_columns(rows, self._column_index if rows.x is not None else None)

    def validate(self, rows: Rows) -> None:
        """``ValueError`` when the rows are outside the model's support (e.g. bad labels)."""
        picked = self.select(rows)
        self.model.validate_data(picked.x, picked.y)

    def update(self, state: Any, rows: Rows, history: History, sequence: int) -> tuple[Any, Info]:
        """Absorb the chunk of ``sequence``; ``history`` holds exactly the rows before it."""
        view = ColumnView(history, self.columns)
        generator = derive_generator(self.seed, self.name, sequence)
        return self.estimator.update(state, view.select(rows), view, generator)

    def summary(self, state: Any, info: Info | None) -> dict[str, Any]:
        details = None if info is None else info.as_dict()
        return {
            "log_evidence": finite(self.estimator.log_evidence(state)),
            "log_evidence_stderr": finite(math.sqrt(self.estimator.log_evidence_variance(state))),
            "n_observations": self.estimator.n_observations(state),
            "ess": finite(self.estimator.ess(state)),
            "info": None if details is None else {
                k: finite(v) if isinstance(v, float) else v for k, v in details.items()
            },
        }

    def predict(self, state: Any, x: torch.Tensor | None) -> Prediction:
        """Posterior predictive at this model's columns of ``x`` (models without inputs get x
        only for its row count)."""
        if x is not None and self.columns is not None:
            x = x[:, self.columns]
        return self.estimator.predict(state, x)
