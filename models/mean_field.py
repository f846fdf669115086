"""What a family provides for MC-CAVI (``modelcompare.estimators.variational``): its mean-field
scheme.

Coordinate-ascent VI sets each factor to q_j ∝ exp(E_{q_−j}[log p(data, θ)]) in turn (Bishop,
PRML eq. 10.9). The updates, the factor densities and the ELBO are the family's maths and live
here, on the model's side; the Monte Carlo that estimates the expectations the updates need
(MCMC chains on a factor, a growing number of draws) is the estimator's, handed in as a
``Sampler``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, TypeVar

import torch
from torch import Tensor

# draws (C, P) -> (log q (C,), ∇ log q (C, P)): a factor's log density up to a constant
LogDensity = Callable[[Tensor], tuple[Tensor, Tensor]]
# (chains (C, P), log q, scale (P, P)) -> chains moved towards q: the estimator's MCMC
Sampler = Callable[[Tensor, LogDensity, Tensor], Tensor]

StateT = TypeVar("StateT")


class MeanField(Protocol[StateT]):
    """A family's mean-field CAVI over rows (x, y); ``StateT`` holds q and the chains."""

    def start(
        self, x: Tensor | None, y: Tensor | None, draws: int, generator: torch.Generator
    ) -> StateT:
        """The initial q and ``draws`` chains per Monte Carlo factor."""
        ...

    def sweep(self, state: StateT, sample: Sampler) -> tuple[StateT, float, float]:
        """One pass over the factors: the new state, the relative change of the monitored
        expectation, and that expectation's relative Monte Carlo standard error."""
        ...

    def resize(self, state: StateT, draws: int) -> StateT:
        """The same q with ``draws`` chains per factor."""
        ...

    def elbo(self, state: StateT) -> float:
        """The evidence lower bound at the state's q, in closed form."""
        ...

    def cavi_elbo(self, x: Tensor | None, y: Tensor | None, generator: torch.Generator) -> float:
        """Plain CAVI (exact expectations) from the same start: the optimum MC-CAVI approaches."""
        ...


def resize_chains(position: Tensor, draws: int) -> Tensor:
    """More chains by duplicating the current ones (the next transitions separate them)."""
    return position.repeat(math.ceil(draws / position.shape[0]), 1)[:draws]
