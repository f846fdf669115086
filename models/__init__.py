"""Probabilistic models compared by modelcompare: pure torch functions, no I/O."""

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
from modelcompare.models.weighting import WeightedRows

FAMILIES: dict[str, type[Model]] = {
    cls.family: cls
    for cls in (
        LinearRegression,
        LinearRegressionUnknownNoise,
        LogisticRegression,
        PoissonRegression,
        GaussianMixture,
        BetaBernoulli,
        GammaPoisson,
    )
}


def build_model(family: str, **config: object) -> Model:
    """Construct a model by family name; raises ``ModelConfigError`` on unknown family or config."""
    try:
        cls = FAMILIES[family]
    except KeyError:
        raise ModelConfigError(
            f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}"
        ) from None
    return cls(**cls.Config.checked(**config).model_dump())


__all__ = [
    "FAMILIES",
    "BetaBernoulli",
    "ConjugateModel",
    "GammaPoisson",
    "GaussianMixture",
    "LinearRegression",
    "LinearRegressionUnknownNoise",
    "LogisticRegression",
    "Model",
    "ModelConfigError",
    "PoissonRegression",
    "Prediction",
    "WeightedRows",
    "WeightedSum",
    "build_model",
]
