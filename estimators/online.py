"""``OnlineEvidence``: the library's front door — one model, one stream, a running log Z."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from estimators.base import Info
from estimators.history import ColumnView, InMemoryHistory, Rows
from estimators.registry import build_estimator
from estimators.rng import derive_generator
from estimators.serialization import state_from_bytes, state_to_bytes
from models import ConjugateModel, Model, Prediction

ArrayLike = Tensor | np.ndarray | Sequence[Any]


def as_tensor(values: ArrayLike | None, ndim: int, name: str) -> Tensor | None:
    """float64 tensor of the given rank with finite entries, or ``ValueError``."""
    if values is None:
        return None
    tensor = torch.as_tensor(np.asarray(values, dtype=np.float64) if not isinstance(
        values, Tensor) else values, dtype=torch.float64)
    if ndim == 2 and tensor.ndim == 1:
        tensor = tensor[:, None]
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(tensor.shape)}")
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return tensor


class OnlineEvidence:
    """Running log evidence of ``model`` on a stream of chunks.

    >>> from models import LinearRegression
    >>> tracker = OnlineEvidence(LinearRegression(dim=2), particles=64, seed=0)
    >>> info = tracker.update([[0.1, 0.2], [0.3, -1.0]], [0.5, -0.2])
    >>> tracker.n_observations
    2

    ``columns`` selects which columns of ``x`` the model reads (default: the first ``input_dim``).
    Every update draws from a generator seeded by (seed, name, update number), so replaying the
    same chunks reproduces the same state bit for bit.
    """

    def __init__(
        self,
        model: Model,
        method: str = "sgais",
        particles: int = 64,
        seed: int = 0,
        *,
        name: str | None = None,
        columns: Sequence[int] | None = None,
        **config: Any,
    ) -> None:
        self.model = model
        self.method = method
        self.seed = seed
        self.name = name or model.family
        self.estimator = build_estimator(method, model, particles=particles, **config)
        if model.input_dim > 0 and columns is None:
            columns = range(model.input_dim)
        self.columns = None if columns is None else list(columns)
        if self.columns is not None and len(self.columns) != model.input_dim:
            raise ValueError(f"{model.family} reads {model.input_dim} columns, got {columns}")
        self._history: InMemoryHistory | None = None
        self._updates = 0
        self.state = self.estimator.init(derive_generator(seed, self.name, "init"))

    @property
    def log_evidence(self) -> float:
        return self.estimator.log_evidence(self.state)

    @property
    def log_evidence_stderr(self) -> float:
        return math.sqrt(self.estimator.log_evidence_variance(self.state))

    @property
    def n_observations(self) -> int:
        return self.estimator.n_observations(self.state)

    def _rows(self, x: ArrayLike | None, y: ArrayLike | None) -> Rows:
        rows = Rows(as_tensor(x, 2, "x"), as_tensor(y, 1, "y"))
        if rows.x is not None and rows.y is not None and rows.x.shape[0] != rows.y.shape[0]:
            raise ValueError(f"x has {rows.x.shape[0]} rows but y has {rows.y.shape[0]}")
        if rows.x is None and rows.y is None:
            raise ValueError("a chunk needs x or y")
        if rows.count == 0:
            raise ValueError("a chunk needs at least one row")
        if self.columns is not None and (rows.x is None or max(self.columns) >= rows.x.shape[1]):
            width = None if rows.x is None else rows.x.shape[1]
            raise ValueError(f"the model reads x columns {self.columns}; x has {width}")
        return rows

    def update(self, x: ArrayLike | None = None, y: ArrayLike | None = None) -> Info:
        """Absorb one chunk; returns what the step did (``Info``)."""
        rows = self._rows(x, y)
        if self._history is None:
            self._history = InMemoryHistory(
                None if rows.x is None else rows.x.shape[1], has_y=rows.y is not None
            )
        view = ColumnView(self._history, self.columns)
        model_rows = view.select(rows)
        self.model.validate_data(model_rows.x, model_rows.y)
        generator = derive_generator(self.seed, self.name, self._updates)
        self.state, info = self.estimator.update(self.state, model_rows, view, generator)
        self._history.append(rows)
        self._updates += 1
        return info

    def predict(self, x: ArrayLike | None = None) -> Prediction:
        """Posterior predictive at ``x`` from the current particles."""
        state = self.state
        if not hasattr(state, "particles"):
            raise NotImplementedError(f"method {self.method!r} keeps no particles to predict with")
        xt = as_tensor(x, 2, "x")
        if xt is not None and self.columns is not None:
            xt = xt[:, self.columns]
        return self.model.predict(state.particles, state.log_weights, xt)

    def state_bytes(self) -> bytes:
        return state_to_bytes(self.state)

    def load_state_bytes(self, data: bytes) -> None:
        self.state = state_from_bytes(self.estimator.state_type, data)


def exact_log_evidence(model: Model, x: ArrayLike | None, y: ArrayLike | None) -> float:
    """Closed-form log p(y | x) for a conjugate model (batch formula)."""
    if not isinstance(model, ConjugateModel):
        raise TypeError(f"{model.family} has no closed-form evidence")
    return float(model.batch_log_evidence(as_tensor(x, 2, "x"), as_tensor(y, 1, "y")))
