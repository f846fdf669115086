"""Synthetic streams for the estimator tests: one per conjugate family, seeded and small."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from modelcompare.models import (
    BetaBernoulli,
    GammaPoisson,
    LinearRegression,
    LinearRegressionUnknownNoise,
)
from modelcompare.models.base import Model

Stream = tuple[Model, torch.Tensor | None, torch.Tensor]


def make_stream(family: str, rows: int, seed: int) -> Stream:
    """A model and data drawn from a fixed truth (not from the prior, to avoid extreme draws)."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    if family == "linear_regression":
        x = torch.randn(rows, 3, generator=g, dtype=f64)
        w = torch.randn(4, generator=g, dtype=f64)
        y = x @ w[:3] + w[3] + torch.randn(rows, generator=g, dtype=f64)
        return LinearRegression(3), x, y
    if family == "linear_regression_unknown_noise":
        x = torch.randn(rows, 2, generator=g, dtype=f64)
        y = (
            x @ torch.tensor([0.7, -0.4], dtype=f64)
            + 0.2
            + 0.5 * torch.randn(rows, generator=g, dtype=f64)
        )
        return LinearRegressionUnknownNoise(2, noise_shape=2.0, noise_scale=0.5), x, y
    if family == "beta_bernoulli":
        y = (torch.rand(rows, generator=g, dtype=f64) < 0.3).to(f64)
        return BetaBernoulli(2.0, 3.0), None, y
    if family == "gamma_poisson":
        y = torch.poisson(torch.full((rows,), 3.0, dtype=f64), generator=g)
        return GammaPoisson(2.0, 0.5), None, y
    raise ValueError(family)


@pytest.fixture
def stream() -> Callable[[str, int, int], Stream]:
    return make_stream
