"""The MC-CAVI evidence lower bound for the families that have one (``estimators.mccavi``)."""

from __future__ import annotations

import torch

from estimators.history import Rows
from estimators.mccavi import MCCAVIConfig, MCCAVIResult, mccavi_regression
from estimators.mccavi_mixture import mccavi_mixture
from models import GaussianMixture, LinearRegressionUnknownNoise, Model
from models.linear_regression import regression_inputs


def has_elbo(model: Model) -> bool:
    return isinstance(model, GaussianMixture | LinearRegressionUnknownNoise)


def mccavi_elbo(model: Model, rows: Rows, generator: torch.Generator,
                config: MCCAVIConfig | None = None) -> MCCAVIResult:
    """MC-CAVI on the model's view of ``rows``; ``TypeError`` for families without one."""
    if isinstance(model, GaussianMixture):
        assert rows.x is not None
        return mccavi_mixture(rows.x, model.components, generator, config)
    if isinstance(model, LinearRegressionUnknownNoise):
        assert rows.y is not None
        x = regression_inputs(model.input_dim, rows.x, rows.y)  # (R, 0) for the normal model
        return mccavi_regression(model, x, rows.y, generator, config)
    raise TypeError(f"no MC-CAVI lower bound for {model.family}")
