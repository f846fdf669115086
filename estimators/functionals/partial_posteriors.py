"""Paths of partial posteriors: unbiased posterior expectations from nested data subsets.

Strathmann, Sejdinovic & Girolami (2015), "Unbiased Bayes for big data: paths of partial
posteriors". With subsets of sizes n_t = min(a·2^t, N), t = 0..L (n_L = N), φ_t = E[φ(θ) | first
n_t rows] and a truncation level T drawn with P(T = t) ∝ 2^(−αt), the Glynn–Rhee estimator

    φ̂ = Σ_{t=0}^{T} (φ_t − φ_{t−1}) / P(T ≥ t),      φ_{−1} = 0                     (eq. 3)

has E_T[φ̂] = Σ_t (φ_t − φ_{t−1}) = φ_L = E[φ(θ) | all N rows]: exactly unbiased, because the
path is finite and ends at the full data. It reads n_T rows, so E[rows] = Σ_t P(T = t)·n_t, of
order a^α·N^(1−α) for 0 < α < 1. R independent repetitions are averaged.

Each repetition permutes the rows once and takes prefixes of that permutation. Unbiasedness
holds either way (the last subset is all rows, whatever the order), but a stream's order need not
be exchangeable (drift, sorted arrivals): random subsets keep φ_t − φ_{t−1} small, which is what
keeps the estimator's variance finite. ``permute=False`` uses the stream's own prefixes.

Partial posteriors come from a ``PathRunner``: the exact posterior for conjugate models
(``ConjugatePath``), or weighted particles of an estimator streamed through the subsets
(``ParticlePath``, unbiased only up to that estimator's own approximation error).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.functionals.posterior_functionals import (
    Functional,
    conjugate_expectation,
    particle_expectation,
)
from modelcompare.estimators.methods import build
from modelcompare.models import ConjugateModel, Model


class PathEstimate(NamedTuple):
    estimate: Tensor  # (K,) mean of the R debiased estimates
    stderr: Tensor  # (K,) their sample standard deviation / √R
    repetitions: int
    alpha: float
    n_observations: int
    rows_used: int  # rows the partial posteriors read, summed over repetitions


class PathRunner(Protocol):
    """Yields φ_0, φ_1, … for the subsets ``rows[:sizes[0]]``, ``rows[:sizes[1]]``, …"""

    def expectations(
        self, rows: Rows, sizes: list[int], functional: Functional, generator: torch.Generator
    ) -> Iterator[Tensor]: ...


class ConjugatePath:
    """Exact partial posteriors: the sufficient statistics grow by the new rows of each subset."""

    def __init__(self, model: ConjugateModel) -> None:
        self.model = model

    def expectations(
        self, rows: Rows, sizes: list[int], functional: Functional, generator: torch.Generator
    ) -> Iterator[Tensor]:
        stats, start = self.model.prior_stats(), 0
        for size in sizes:
            piece = rows.slice(start, size)
            stats, start = self.model.update_stats(stats, piece.x, piece.y), size
            yield conjugate_expectation(self.model, stats, functional)


class ParticlePath:
    """Partial posteriors from one estimator run streamed through the subsets: each subset adds
    its new rows as one chunk, so consecutive φ_t share particles (their difference is small)."""

    def __init__(self, model: Model, method: str = "sgais", **settings: Any) -> None:
        self.model = model
        self.estimator = build(model, method, **settings)

    def expectations(
        self, rows: Rows, sizes: list[int], functional: Functional, generator: torch.Generator
    ) -> Iterator[Tensor]:
        if generator.device != self.estimator.device:  # the estimator draws on its own device
            seed = int(torch.randint(1 << 62, (1,), generator=generator, device=generator.device))
            generator = self.estimator.generator(seed)
        if functional.x is not None:
            functional = Functional(functional.kind, functional.x.to(self.estimator.device))
        state, start = self.estimator.init(generator), 0
        for size in sizes:
            past = RowsHistory(rows.slice(0, start))
            state, _ = self.estimator.update(state, rows.slice(start, size), past, generator)
            start = size
            expectation = particle_expectation(
                self.model, state.particles, state.log_weights, functional
            )
            yield expectation.cpu()


def path_runner(model: Model, method: str = "sgais", **settings: Any) -> PathRunner:
    """Exact partial posteriors where the model has a closed form, else an estimator's
    particles."""
    oracle = model.closed_form()
    if oracle is not None:
        return ConjugatePath(oracle)
    return ParticlePath(model, method, **settings)


def subset_sizes(n: int, base_size: int) -> list[int]:
    """n_t = min(a·2^t, N) for t = 0..L, the last one N."""
    if n < 1 or base_size < 1:
        raise ValueError(f"need at least one row and base_size >= 1, got {n} and {base_size}")
    levels = max(0, math.ceil(math.log2(n / base_size))) if n > base_size else 0
    return [min(base_size * 2**t, n) for t in range(levels + 1)]


def truncation_probabilities(levels: int, alpha: float) -> Tensor:
    """P(T = t) ∝ 2^(−αt) for t = 0..levels−1."""
    log_p = -alpha * math.log(2.0) * torch.arange(levels, dtype=torch.float64)
    return torch.softmax(log_p, 0)


def expected_rows(n: int, alpha: float, base_size: int) -> float:
    """E[n_T] = Σ_t P(T = t)·n_t: the expected rows one repetition reads."""
    sizes = subset_sizes(n, base_size)
    probabilities = truncation_probabilities(len(sizes), alpha)
    return float(probabilities @ torch.tensor(sizes, dtype=torch.float64))


def random_subset(n: int, size: int, generator: torch.Generator) -> Tensor:
    """``size`` distinct indices of ``range(n)`` in uniformly random order: the first ``size``
    of a random permutation, drawn in O(size log size) rather than O(n) when size ≪ n (draw
    with replacement, keep the distinct ones, which by symmetry form a uniform subset)."""
    if 2 * size > n:
        return torch.randperm(n, generator=generator)[:size]
    distinct = torch.empty(0, dtype=torch.int64)
    while distinct.shape[0] < size:
        extra = torch.randint(0, n, (size + size // 4 + 16,), generator=generator)
        distinct = torch.unique(torch.cat([distinct, extra]))
    return distinct[torch.randperm(distinct.shape[0], generator=generator)[:size]]


def debiased_expectation(
    runner: PathRunner,
    rows: Rows,
    functional: Functional,
    generator: torch.Generator,
    *,
    repetitions: int = 100,
    alpha: float = 0.5,
    base_size: int = 16,
    permute: bool = True,
) -> PathEstimate:
    """The average of ``repetitions`` independent estimates (eq. 3) of E[φ(θ) | rows]."""
    if not (isinstance(repetitions, int) and repetitions >= 1):
        raise ValueError(f"repetitions must be an integer >= 1, got {repetitions!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n = rows.count
    sizes = subset_sizes(n, base_size)
    probabilities = truncation_probabilities(len(sizes), alpha)
    survival = probabilities.flip(0).cumsum(0).flip(0)  # P(T ≥ t)
    estimates, rows_used = [], 0
    for _ in range(repetitions):
        last = int(torch.multinomial(probabilities, 1, generator=generator))
        used = sizes[last]
        subset = rows.take(random_subset(n, used, generator)) if permute else rows.slice(0, used)
        total, previous = None, None
        path = runner.expectations(subset, sizes[: last + 1], functional, generator)
        for t, value in enumerate(path):
            step = value if previous is None else value - previous
            total = step / survival[t] if total is None else total + step / survival[t]
            previous = value
        assert total is not None
        estimates.append(total)
        rows_used += used
    stacked = torch.stack(estimates)
    spread = stacked.std(0) if repetitions > 1 else torch.full_like(stacked[0], torch.inf)
    return PathEstimate(
        estimate=stacked.mean(0),
        stderr=spread / math.sqrt(repetitions),
        repetitions=repetitions,
        alpha=alpha,
        n_observations=n,
        rows_used=rows_used,
    )
