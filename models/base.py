"""The interface every compared model implements.

A model is a small immutable object of pure torch functions over a batch of parameter vectors
``theta`` of shape ``(M, D)`` (M particles, D = ``param_dim``) in unconstrained space; constrained
parameters carry their log-Jacobian inside ``log_prior``. Data is ``x`` of shape ``(R, input_dim)``
(``None`` when ``input_dim == 0``) and ``y`` of shape ``(R,)`` (``None`` when the model has no
target). Everything is float64, on the device of the tensors (or generator) passed in, except
that the sums prepared for many θ (``weighted_sum``, ``stepwise_sums``) compute in the dtype of
their rows: the estimators' moves prepare them in float32
(``modelcompare.estimators.online.precision``).

What only some families have is reached through methods, never by testing a model's class:
``closed_form()`` (the conjugate oracle) and ``mean_field()`` (the MC-CAVI scheme) return None
for families without one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import torch
from torch import Tensor

from modelcompare.models.target import REAL, Target
from modelcompare.models.weighting import WeightedRows

if TYPE_CHECKING:
    from modelcompare.models.config import FamilyConfig
    from modelcompare.models.mean_field import MeanField


class ModelConfigError(ValueError):
    """A model was configured with values it cannot work with."""


@dataclass(frozen=True)
class Prediction:
    """Posterior-predictive summary at query inputs, one row per query point.

    ``mean``/``variance`` for regression, ``probabilities`` (R, K) for classification,
    ``log_density`` (R,) for density models (and for a ``y`` given to ``predict``).
    """

    mean: Tensor | None = None
    variance: Tensor | None = None
    probabilities: Tensor | None = None
    log_density: Tensor | None = None


class WeightedSum(Protocol):
    """Σ over weighted blocks of rows of log p(y_r | x_r, θ), prepared once for many θ (every
    step of an HMC trajectory evaluates the same rows at new positions)."""

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The weighted sum per particle (M,) and its gradient (M, D)."""
        ...

    def grad(self, theta: Tensor) -> Tensor:
        """The gradient alone (M, D)."""
        ...


class Model(ABC):
    """A Bayesian model: prior and likelihood over unconstrained parameters."""

    family: ClassVar[str]
    # The family's settings record (models/config.py): the constructor validates its arguments
    # with it, and the service publishes its JSON schema.
    Config: ClassVar[type[FamilyConfig]]
    # Whether the sums ``weighted_sum`` and ``stepwise_sums`` prepare pass over their rows at each
    # θ. The estimators' moves compute such sums in float32 when asked; a family whose prepared
    # sums are summaries of the rows (linear regression's normal equations) says False, since
    # float32 would only add conversions there.
    gradients_read_rows: ClassVar[bool] = True
    param_dim: int
    input_dim: int
    has_target: bool

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments; ``type(self)(**self.config())`` rebuilds the model."""

    @abstractmethod
    def log_prior(self, theta: Tensor) -> Tensor:
        """(M, D) -> (M,), including the log-Jacobian of any constraining transform."""

    @abstractmethod
    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        """(M, D), (R, P), (R,) -> (M, R): log p(y_r | x_r, theta_m) per particle and row."""

    @abstractmethod
    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        """Draw ``num`` parameter vectors from the prior, in unconstrained space: (num, D)."""

    @abstractmethod
    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Posterior predictive at query rows, averaging over weighted particles."""

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        """Raise ``ValueError`` when data is outside the model's support (e.g. bad labels)."""
        if self.input_dim > 0:
            if x is None:
                raise ValueError(f"{self.family} needs x with {self.input_dim} columns")
            if x.ndim != 2 or x.shape[1] != self.input_dim:
                raise ValueError(
                    f"{self.family} needs x with {self.input_dim} columns, got shape "
                    f"{tuple(x.shape)}"
                )
        if self.has_target and y is None:
            raise ValueError(f"{self.family} needs y")
        target = self.target()
        if target is not None and y is not None and bool(target.refused(y).any()):
            raise ValueError(f"{self.family} needs {target.requirement()}")

    def target(self) -> Target | None:
        """The values y may take (``validate_data`` refuses others; the service publishes it so
        that clients check rows without this code); None when the model has no target."""
        return REAL if self.has_target else None

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        """Gradient of ``row_weight * sum_r log p(y_r | x_r, theta)`` per particle: (M, D).

        Autograd by default; models override with closed forms where they are cheaper.
        """
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            total = self.log_likelihood(leaf, x, y).sum() * row_weight
            (grad,) = torch.autograd.grad(total, leaf)
        return grad

    def row_grad_log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        """Gradient of each row's log p(y_r | x_r, theta) per particle: (M, R, D).

        Autograd mapped over rows by default (row r's gradient of Σ_m log p(y_r | θ_m) is θ_m's
        own, as rows and particles do not interact); models override with closed forms.
        """

        def one_row(x_row: Tensor | None, y_row: Tensor | None) -> Tensor:
            def total(leaf: Tensor) -> Tensor:
                x_one = None if x_row is None else x_row[None]
                y_one = None if y_row is None else y_row[None]
                return self.log_likelihood(leaf, x_one, y_one).sum()

            return torch.func.grad(total)(theta)

        in_dims = (None if x is None else 0, None if y is None else 0)
        return torch.func.vmap(one_row, in_dims=in_dims)(x, y).transpose(0, 1)

    def row_grad_log_likelihood_times(
        self,
        theta: Tensor,
        x: Tensor | None,
        y: Tensor | None,
        matrix: Tensor,
        anchor: Tensor | None = None,
    ) -> Tensor:
        """(∇ℓ_r(θ_m) − ∇ℓ_r(θ_a)) A per particle and row, A = ``matrix`` (D, C) and θ_a =
        ``anchor`` (D,): (M, R, C); without an anchor ∇ℓ_r(θ_m) A. Models whose row gradients
        have structure override it with a cheaper product."""
        if anchor is None:
            return self.row_grad_log_likelihood(theta, x, y) @ matrix
        both = self.row_grad_log_likelihood(torch.cat([theta, anchor[None]]), x, y) @ matrix
        return both[:-1] - both[-1:]

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        """``row_weight * sum_r log p(y_r | x_r, theta)`` per particle (M,) and its gradient
        (M, D) together: one autograd pass by default; models override with closed forms."""
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            total = self.log_likelihood(leaf, x, y).sum(-1) * row_weight
            (grad,) = torch.autograd.grad(total.sum(), leaf)
        return total.detach(), grad

    def log_likelihood_and_grad_of_parts(
        self, theta: Tensor, parts: Sequence[WeightedRows]
    ) -> tuple[Tensor, Tensor]:
        """Σ over ``parts`` (x, y, row weight) of ``log_likelihood_and_grad``: a tempered target's
        weighted sum over several blocks of rows. One call per part by default; models override
        to make one pass over all rows (``weighting.joined_rows``)."""
        value = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
        grad = torch.zeros_like(theta)
        for x, y, row_weight in parts:
            part_value, part_grad = self.log_likelihood_and_grad(theta, x, y, row_weight)
            value = value + part_value
            grad = grad + part_grad
        return value, grad

    def grad_log_likelihood_of_parts(self, theta: Tensor, parts: Sequence[WeightedRows]) -> Tensor:
        """The gradient alone of ``log_likelihood_and_grad_of_parts`` (M, D)."""
        grad = torch.zeros_like(theta)
        for x, y, row_weight in parts:
            grad = grad + self.grad_log_likelihood(theta, x, y, row_weight)
        return grad

    def weighted_sum(self, parts: Sequence[WeightedRows]) -> WeightedSum:
        """``*_of_parts`` over fixed ``parts`` as one object; models override it to compute once
        what does not depend on θ (joined rows, their design, label terms)."""
        return PartsSum(self, tuple(parts))

    def stepwise_sums(
        self, fixed: Sequence[WeightedRows], streams: Sequence[WeightedRows], steps: int
    ) -> list[WeightedSum]:
        """For each of ``steps`` steps, the weighted sum over ``fixed`` and the step's slice of
        each of ``streams`` (cut into ``steps`` equal consecutive slices): the targets of a
        minibatch trajectory, prepared together. One ``weighted_sum`` per step by default."""

        def cut(stream: WeightedRows, i: int) -> WeightedRows:
            x, y, weight = stream
            size = (x if y is None else y).shape[0] // steps
            return (
                None if x is None else x[i * size : (i + 1) * size],
                None if y is None else y[i * size : (i + 1) * size],
                weight,
            )

        return [
            self.weighted_sum([*fixed, *(cut(stream, i) for stream in streams)])
            for i in range(steps)
        ]

    def relabelings(self, theta: Tensor) -> Tensor:
        """(M, D) -> (G, M, D): every relabeling of each θ that leaves prior and likelihood
        unchanged (mixture components are exchangeable), by linear maps with |det| = 1, the
        identity first. A model without such symmetries has G = 1."""
        return theta[None]

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.log_prior(leaf).sum(), leaf)
        return grad

    def closed_form(self) -> ConjugateModel | None:
        """The model's closed-form posterior and evidence (sufficient statistics), or None."""
        return None

    def mean_field(self) -> MeanField[Any] | None:
        """The family's mean-field coordinate-ascent scheme (MC-CAVI's maths), or None."""
        return None


class PartsSum(NamedTuple):
    """``Model.weighted_sum`` by default: the model's ``*_of_parts`` on every call."""

    model: Model
    parts: tuple[WeightedRows, ...]

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.log_likelihood_and_grad_of_parts(theta, self.parts)

    def grad(self, theta: Tensor) -> Tensor:
        return self.model.grad_log_likelihood_of_parts(theta, self.parts)


class ConjugateModel(ABC):
    """A model whose evidence has a closed form, updated through sufficient statistics.

    ``stats`` is a dict of float64 tensors (the exact posterior); the exact estimator stores it.
    """

    @abstractmethod
    def prior_stats(self) -> dict[str, Tensor]:
        """Posterior hyper-parameters before any data."""

    @abstractmethod
    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        """log p(chunk | past) under the posterior ``stats``, jointly over the chunk's rows."""

    @abstractmethod
    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        """Posterior hyper-parameters after conditioning on the chunk."""

    @abstractmethod
    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """The exact posterior predictive at query rows, same fields as ``Model.predict``."""

    @abstractmethod
    def posterior_moments(self, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Exact posterior mean and variance of each coordinate of the unconstrained θ."""

    @abstractmethod
    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """log p(y_1..n) in one closed-form expression (independent of the sequential path)."""
