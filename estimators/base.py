"""What every estimator shares: the step report (``Info``) and the estimator protocol."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from estimators.history import History, Rows
from models import Prediction


class EstimatorConfigError(ValueError):
    """An estimator setting is out of its valid range."""


class EstimatorError(RuntimeError):
    """An update could not be computed: non-finite likelihoods, a stalled annealing ladder, a
    degenerate particle cloud. The state passed in is untouched (states are immutable)."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise EstimatorConfigError(message)


def check_int(name: str, value: object, minimum: int) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    check(ok, f"{name} must be an integer >= {minimum}, got {value!r}")


def check_number(
    name: str, value: object, low: float, high: float, closed_below: bool = False
) -> None:
    """A finite number with ``low < value <= high`` (``low <= value`` when ``closed_below``)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        above = number >= low if closed_below else number > low
        ok = math.isfinite(number) and above and number <= high
    bracket = "[" if closed_below else "("
    check(ok, f"{name} must be a finite number in {bracket}{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class Info:
    """What one ``update`` did. ``log_evidence_increment`` is log p̂(chunk | past)."""

    rows: int
    log_evidence_increment: float
    log_evidence_increment_variance: float
    ess: float  # effective sample size of the particle weights after the update
    min_ess: float  # smallest ESS reached during annealing, before any resampling
    annealing_steps: int
    resamples: int
    sub_chunks: int
    reanchors: int
    acceptance_rate: float = float("nan")  # mean Metropolis acceptance of exact moves, if any

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


StateT = TypeVar("StateT")


class Estimator(Protocol[StateT]):
    """``init`` + ``update`` over explicit, immutable state (a NamedTuple of tensors)."""

    state_type: type

    def init(self, generator: torch.Generator) -> StateT: ...

    def update(
        self, state: StateT, chunk: Rows, history: History, generator: torch.Generator
    ) -> tuple[StateT, Info]: ...

    def log_evidence(self, state: StateT) -> float: ...

    def log_evidence_variance(self, state: StateT) -> float: ...

    def n_observations(self, state: StateT) -> int: ...

    def ess(self, state: StateT) -> float:
        """Effective sample size of the state's particle weights (NaN without particles)."""
        ...

    def predict(self, state: StateT, x: Tensor | None) -> Prediction:
        """Posterior predictive at the model's view of query rows ``x``."""
        ...
