"""A conjugate Gaussian posterior the move kernels are checked against."""

from __future__ import annotations

import torch

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.models import LinearRegression

ROWS = 2000


def conjugate_posterior(
    seed: int,
) -> tuple[LinearRegression, RowsHistory, torch.Tensor, torch.Tensor]:
    """Linear regression with 2 inputs: data, exact posterior mean (3,) and covariance (3, 3)."""
    g = torch.Generator().manual_seed(seed)
    model = LinearRegression(2)
    x = torch.randn(ROWS, 2, generator=g, dtype=torch.float64)
    noise = torch.randn(ROWS, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0], dtype=torch.float64) + 0.3 + noise
    stats = model.update_stats(model.prior_stats(), x, y)
    cov = torch.linalg.inv(stats["precision"])
    return model, RowsHistory(Rows(x, y)), cov @ stats["shift"], cov
