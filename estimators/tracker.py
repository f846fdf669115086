"""``OnlineEvidence``: the library's front door — one model, one stream, a running log Z."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from safetensors.torch import save
from torch import Tensor

from modelcompare.estimators.data.history import ColumnView, InMemoryHistory, Rows, select_columns
from modelcompare.estimators.data.serialization import (
    read_safetensors,
    state_from_tensors,
    state_to_bytes,
    state_to_tensors,
)
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.methods import build
from modelcompare.models import Model, Prediction

ArrayLike = Tensor | np.ndarray | Sequence[Any]


def as_tensor(values: ArrayLike | None, ndim: int, name: str) -> Tensor | None:
    """float64 tensor of the given rank with finite entries, or ``ValueError``."""
    if values is None:
        return None
    if isinstance(values, Tensor):
        tensor = values.to(torch.float64)
    else:
        tensor = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if ndim == 2 and tensor.ndim == 1:
        tensor = tensor[:, None]
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(tensor.shape)}")
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return tensor


class OnlineEvidence:
    """Running log evidence of ``model`` on a stream of chunks.

    >>> from modelcompare.models import LinearRegression
    >>> tracker = OnlineEvidence(LinearRegression(dim=2), particles=64, seed=0)
    >>> info = tracker.update([[0.1, 0.2], [0.3, -1.0]], [0.5, -0.2])
    >>> tracker.n_observations
    2

    ``columns`` selects which columns of ``x`` the model reads (default: the first ``input_dim``).
    ``particles`` and the other settings are the method's (``modelcompare.estimators.METHODS``;
    defaults when left out). Every update draws from a generator seeded by (seed, name, update
    number), so replaying the same chunks reproduces the same state bit for bit.
    """

    def __init__(
        self,
        model: Model,
        method: str = "sgais",
        particles: int | None = None,
        seed: int = 0,
        *,
        name: str | None = None,
        columns: Sequence[int] | None = None,
        **settings: Any,
    ) -> None:
        self.model = model
        self.method = method
        self.seed = seed
        self.name = name or model.family
        if particles is not None:
            settings["particles"] = particles
        self.estimator = build(model, method, **settings)
        if model.input_dim > 0 and columns is None:
            columns = range(model.input_dim)
        self.columns = None if columns is None else list(columns)
        if self.columns is not None and len(self.columns) != model.input_dim:
            raise ValueError(f"{model.family} reads {model.input_dim} columns, got {columns}")
        self._column_index = None if self.columns is None else torch.tensor(self.columns)
        self._history: InMemoryHistory | None = None
        self._updates = 0
        self.state = self.estimator.init(self.estimator.generator(seed, self.name, "init"))

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
        """The chunk as tensors, checked against the model and the stored history."""
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
        if self._history is not None:
            stored = self._history.rows()
            width = None if rows.x is None else rows.x.shape[1]
            stored_width = None if stored.x is None else stored.x.shape[1]
            if width != stored_width or (rows.y is None) != (stored.y is None):
                raise ValueError(
                    f"the stream has x width {stored_width} and y "
                    f"{'absent' if stored.y is None else 'present'}; this chunk differs"
                )
        model_rows = select_columns(rows, self._column_index)
        self.model.validate_data(model_rows.x, model_rows.y)
        return rows

    def update(
        self,
        x: ArrayLike | None = None,
        y: ArrayLike | None = None,
        deadline: Deadline | None = None,
    ) -> Any:
        """Absorb one chunk; returns what the step did (the method's Info record). Bad input
        raises ``ValueError``, an update past ``deadline`` ``BudgetExceeded``; either way the
        tracker is unchanged."""
        rows = self._rows(x, y)
        history = self._history or InMemoryHistory(
            None if rows.x is None else rows.x.shape[1], has_y=rows.y is not None
        )
        view = ColumnView(history, self.columns)
        generator = self.estimator.generator(self.seed, self.name, self._updates)
        self.state, info = self.estimator.update(
            self.state, view.select(rows), view, generator, deadline
        )
        history.append(rows)
        self._history = history
        self._updates += 1
        return info

    def predict(self, x: ArrayLike | None = None) -> Prediction:
        """Posterior predictive at the stream-wide rows ``x`` (the model reads its columns)."""
        rows = as_tensor(x, 2, "x")
        if rows is not None and self._column_index is not None:
            rows = rows.index_select(1, self._column_index)
        return self.estimator.predict(self.state, rows)

    def state_bytes(self) -> bytes:
        """The estimator state alone (safetensors bytes)."""
        return state_to_bytes(self.state)

    def save(self) -> bytes:
        """State, stored rows and update count: everything ``load`` needs to resume exactly."""
        tensors = state_to_tensors(self.state, "state.")
        if self._history is not None:
            stored = self._history.rows()
            tensors.update(
                {f"history.{k}": v.clone() for k, v in stored._asdict().items() if v is not None}
            )
        tensors["updates"] = torch.tensor(self._updates)
        return save(tensors, metadata=self._identity())

    def load(self, data: bytes) -> None:
        """Resume from ``save`` output of a tracker built with the same model and settings."""
        metadata, tensors = read_safetensors(data)
        if metadata != self._identity():
            raise ValueError(f"saved tracker {metadata} does not match {self._identity()}")
        state = state_from_tensors(
            self.estimator.state_type,
            {k: v for k, v in tensors.items() if k.startswith("state.")},
            "state.",
            self.estimator.device,
        )
        history = None
        if "history.x" in tensors or "history.y" in tensors:
            x, y = tensors.get("history.x"), tensors.get("history.y")
            history = InMemoryHistory(None if x is None else x.shape[1], has_y=y is not None)
            history.append(Rows(x, y))
        if (0 if history is None else len(history)) != self.estimator.n_observations(state):
            raise ValueError("saved history and state disagree on the number of rows")
        self.state, self._history = state, history
        self._updates = int(tensors["updates"])

    def _identity(self) -> dict[str, str]:
        return {
            "family": self.model.family,
            "model": json.dumps(self.model.config(), sort_keys=True),
            "method": self.method,
            "name": self.name,
            "seed": str(self.seed),
            "columns": json.dumps(self.columns),
        }


def exact_log_evidence(model: Model, x: ArrayLike | None, y: ArrayLike | None) -> float:
    """Closed-form log p(y | x) for a model with one (batch formula)."""
    oracle = model.closed_form()
    if oracle is None:
        raise TypeError(f"{model.family} has no closed-form evidence")
    return float(oracle.batch_log_evidence(as_tensor(x, 2, "x"), as_tensor(y, 1, "y")))
