"""The per-family settings records: one per family, and the constructor validates with it."""

from __future__ import annotations

import inspect

import pytest

from modelcompare.models import FAMILIES, ModelConfigError, build_model
from modelcompare.models.config import (
    MAX_CLASSES,
    MAX_COMPONENTS,
    MAX_INPUT_DIM,
    MAX_SCALE,
    FamilyConfig,
)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_constructor_takes_exactly_the_record(family: str) -> None:
    """The constructor's parameters are the record's fields, with the same defaults, and
    ``config()`` rebuilds the record."""
    cls = FAMILIES[family]
    assert issubclass(cls.Config, FamilyConfig)
    parameters = inspect.signature(cls.__init__).parameters
    assert list(parameters)[1:] == list(cls.Config.model_fields)
    for name, field in cls.Config.model_fields.items():
        default = parameters[name].default
        if field.is_required():
            assert default is inspect.Parameter.empty, name
        else:
            assert default == field.default, name
        assert field.description, f"{family}.{name} has no description"


@pytest.mark.parametrize(
    ("family", "config", "problem"),
    [
        ("linear_regression", {"dim": MAX_INPUT_DIM + 1}, "dim: Input should be less than"),
        ("linear_regression", {"dim": "3"}, "dim: Input should be a valid integer"),
        ("linear_regression", {"dim": 2.5}, "dim: Input should be a valid integer"),
        ("linear_regression", {"dim": 2, "noise_std": 0.0}, "noise_std: Input should be greater"),
        ("linear_regression", {"dim": 2, "prior_std": MAX_SCALE * 10}, "prior_std: Input should"),
        ("logistic_regression", {"dim": 2, "classes": 1}, "classes: Input should be greater"),
        ("logistic_regression", {"dim": 2, "classes": MAX_CLASSES + 1}, "classes: Input should"),
        ("gaussian_mixture", {"dim": 1, "components": MAX_COMPONENTS + 1}, "components: Input"),
        ("beta_bernoulli", {"alpha": True}, "alpha: Input should be a valid number"),
        ("gamma_poisson", {"shape": float("inf")}, "shape: Input should be a finite number"),
    ],
)
def test_bounds_and_types_are_enforced(family: str, config: dict, problem: str) -> None:
    with pytest.raises(ModelConfigError, match=problem):
        build_model(family, **config)


@pytest.mark.parametrize(
    ("family", "config", "message"),
    [
        ("linear_regression", {"dim": 1, "noise_sd": 1.0},
         "LinearRegressionConfig: unknown key 'noise_sd' (did you mean 'noise_std'? valid keys: "
         "dim, noise_std, prior_std)"),
        ("gamma_poisson", {"mean": 1.0},
         "GammaPoissonConfig: unknown key 'mean' (valid keys: shape, rate)"),
        ("beta_bernoulli", {"alpha": "1", "bta": 1.0},
         "BetaBernoulliConfig: alpha: Input should be a valid number; unknown key 'bta' (did you "
         "mean 'beta'? valid keys: alpha, beta)"),
    ],
)
def test_an_unknown_key_names_the_valid_ones_and_the_closest(
    family: str, config: dict, message: str
) -> None:
    with pytest.raises(ModelConfigError) as raised:
        build_model(family, **config)
    assert str(raised.value) == message


def test_largest_allowed_values_build() -> None:
    assert build_model("gaussian_mixture", dim=1, components=MAX_COMPONENTS).components == 6
    assert build_model("logistic_regression", dim=1, classes=MAX_CLASSES).classes == MAX_CLASSES
    assert build_model("linear_regression", dim=MAX_INPUT_DIM).input_dim == MAX_INPUT_DIM


def test_an_integral_float_is_an_integer() -> None:
    """JSON (and JSON Schema) do not tell 3 from 3.0: both mean the integer 3."""
    model = build_model("logistic_regression", dim=3.0, classes=2.0)
    assert model.config() == {"dim": 3, "classes": 2}
    assert isinstance(model.param_dim, int) and model.param_dim == 8
