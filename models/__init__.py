"""Probabilistic models compared by modelcompare: pure torch functions, no I/O."""

from typing import Any

from modelcompare.models.base import (
    ConjugateModel,
    Model,
    ModelConfigError,
    Prediction,
    WeightedSum,
)
from modelcompare.models.beta_bernoulli import BetaBernoulli
from modelcompare.models.gamma_poisson import GammaPoisson
from modelcompare.models.gaussian_mixture import GaussianMixture
from modelcompare.models.linear_regression import LinearRegression
from modelcompare.models.linear_regression_unknown_noise import LinearRegressionUnknownNoise
from modelcompare.models.logistic_regression import LogisticRegression
from modelcompare.models.poisson_regression import PoissonRegression
from modelcompare.models.registry import Family, FamilyUnavailable, build_model, families
from modelcompare.models.target import Target
from modelcompare.models.weighting import WeightedRows


def __getattr__(name: str) -> Any:
    # FAMILIES (family name → Model class) on first use: loading the plugins imports their
    # modules, which import this package (registry.py).
    if name == "FAMILIES":
        return {family.name: family.model for family in families().known.values()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "BetaBernoulli",
    "ConjugateModel",
    "Family",
    "FamilyUnavailable",
    "GammaPoisson",
    "GaussianMixture",
    "LinearRegression",
    "LinearRegressionUnknownNoise",
    "LogisticRegression",
    "Model",
    "ModelConfigError",
    "PoissonRegression",
    "Prediction",
    "Target",
    "WeightedRows",
    "WeightedSum",
    "build_model",
    "families",
]
