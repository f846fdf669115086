"""The FAMILIES registry, build_model, and the Model contract every family honours."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.online.spread import FROZEN, relative_spread
from modelcompare.models import FAMILIES, ConjugateModel, Model, ModelConfigError, build_model

CONFIGS: dict[str, dict] = {
    "linear_regression": {"dim": 3, "noise_std": 0.5},
    "linear_regression_unknown_noise": {"dim": 3, "noise_shape": 2.0},
    "logistic_regression": {"dim": 3, "classes": 4},
    "poisson_regression": {"dim": 3, "prior_std": 0.5},
    "gaussian_mixture": {"dim": 2, "components": 3},
    "beta_bernoulli": {"alpha": 2.0, "beta": 3.0},
    "gamma_poisson": {"shape": 2.0, "rate": 0.5},
}
CONJUGATE = {
    "linear_regression",
    "linear_regression_unknown_noise",
    "beta_bernoulli",
    "gamma_poisson",
}
MEAN_FIELD = {"linear_regression_unknown_noise", "gaussian_mixture"}
PREDICTION_FIELD = {
    "linear_regression": "mean",
    "linear_regression_unknown_noise": "mean",
    "logistic_regression": "probabilities",
    "poisson_regression": "mean",
    "gaussian_mixture": "log_density",
    "beta_bernoulli": "probabilities",
    "gamma_poisson": "mean",
}


def example_data(model: Model, rows: int, generator: torch.Generator):
    x = None
    if model.input_dim > 0:
        x = torch.randn(rows, model.input_dim, generator=generator, dtype=torch.float64)
    if not model.has_target:
        return x, None
    uniform = torch.rand(rows, generator=generator, dtype=torch.float64)
    y = {
        "logistic_regression": torch.floor(4 * uniform),
        "beta_bernoulli": (uniform < 0.3).to(torch.float64),
        "gamma_poisson": torch.floor(6 * uniform),
        "poisson_regression": torch.floor(6 * uniform),
    }.get(model.family, 2 * uniform - 1)
    return x, y


def test_registry_lists_every_family() -> None:
    assert set(FAMILIES) == set(CONFIGS)
    for name, cls in FAMILIES.items():
        assert cls.family == name
        assert issubclass(cls, ConjugateModel) == (name in CONJUGATE)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_optional_maths_is_reached_through_methods(family: str) -> None:
    """Estimators ask the model, never its class: the conjugate oracle and the MC-CAVI scheme."""
    model = build_model(family, **CONFIGS[family])
    oracle = model.closed_form()
    assert (oracle is not None) == (family in CONJUGATE)
    assert (model.mean_field() is not None) == (family in MEAN_FIELD)
    if oracle is not None:
        mean, variance = oracle.posterior_moments(oracle.prior_stats())
        assert mean.shape == variance.shape == (model.param_dim,)
        assert bool((variance > 0).all())


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_model_contract(family: str, generator: torch.Generator) -> None:
    model = build_model(family, **CONFIGS[family])
    assert type(model)(**model.config()).config() == model.config()
    theta = model.sample_prior(7, generator)
    again = model.sample_prior(7, torch.Generator().manual_seed(1234))
    assert torch.equal(theta, again), "sample_prior must be a function of the generator"
    assert theta.shape == (7, model.param_dim) and theta.dtype == torch.float64

    x, y = example_data(model, 11, generator)
    model.validate_data(x, y)
    log_prior = model.log_prior(theta)
    log_lik = model.log_likelihood(theta, x, y)
    assert log_prior.shape == (7,) and torch.isfinite(log_prior).all()
    assert log_lik.shape == (7, 11) and torch.isfinite(log_lik).all()
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, x, y, row_weight=2.0),
        Model.grad_log_likelihood(model, theta, x, y, row_weight=2.0),
        rtol=1e-9,
        atol=1e-9,
    )
    rows = model.row_grad_log_likelihood(theta, x, y)
    assert rows.shape == (7, 11, model.param_dim)
    torch.testing.assert_close(
        rows, Model.row_grad_log_likelihood(model, theta, x, y), rtol=1e-9, atol=1e-9
    )
    torch.testing.assert_close(
        rows.sum(1), model.grad_log_likelihood(theta, x, y), rtol=1e-9, atol=1e-9
    )
    matrix = torch.randn(model.param_dim, 3, generator=generator, dtype=torch.float64)
    times = model.row_grad_log_likelihood_times(theta, x, y, matrix)
    torch.testing.assert_close(times, rows @ matrix, rtol=1e-9, atol=1e-9)
    anchored = model.row_grad_log_likelihood_times(theta, x, y, matrix, anchor=theta[0])
    torch.testing.assert_close(anchored, (rows - rows[:1]) @ matrix, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        model.grad_log_prior(theta), Model.grad_log_prior(model, theta), rtol=1e-9, atol=1e-9
    )
    prediction = model.predict(theta, torch.zeros(7, dtype=torch.float64), x)
    value = getattr(prediction, PREDICTION_FIELD[family])
    assert value is not None and value.shape[0] == (11 if x is not None else 1)
    assert torch.isfinite(value).all()


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_weighted_parts_are_the_sum_of_weighted_blocks(
    family: str, generator: torch.Generator
) -> None:
    """The fused tempered-target kernels equal Σ_parts w · (log-likelihood, autograd gradient)."""
    model = build_model(family, **CONFIGS[family])
    theta = model.sample_prior(5, generator)
    x, y = example_data(model, 9, generator)
    blocks = [(0, 4, 0.3), (4, 9, 2.5)]
    parts = [
        (None if x is None else x[a:b], None if y is None else y[a:b], w) for a, b, w in blocks
    ]
    expected_value = sum(w * model.log_likelihood(theta, px, py).sum(-1) for px, py, w in parts)
    expected_grad = sum(Model.grad_log_likelihood(model, theta, px, py, w) for px, py, w in parts)
    value, grad = model.log_likelihood_and_grad_of_parts(theta, parts)
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        model.grad_log_likelihood_of_parts(theta, parts), expected_grad, rtol=1e-9, atol=1e-9
    )
    value, grad = model.log_likelihood_and_grad(theta, x, y, 0.7)
    torch.testing.assert_close(value, 0.7 * model.log_likelihood(theta, x, y).sum(-1))
    torch.testing.assert_close(grad, Model.grad_log_likelihood(model, theta, x, y, 0.7))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_prepared_sums_are_the_weighted_parts(family: str, generator: torch.Generator) -> None:
    """``weighted_sum`` and ``stepwise_sums`` (rows prepared once for many θ) give what
    ``*_of_parts`` gives on the same rows: a fixed block, then each step's slice of every
    stream."""
    model = build_model(family, **CONFIGS[family])
    theta = model.sample_prior(5, generator)
    x, y = example_data(model, 10, generator)

    def rows(a: int, b: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        return (None if x is None else x[a:b], None if y is None else y[a:b])

    fixed = [(*rows(0, 4), 0.3)]
    streams = [(*rows(4, 10), 2.5), (*rows(1, 4), 1.7)]
    for i, prepared in enumerate(model.stepwise_sums(fixed, streams, 3)):
        parts = [*fixed, (*rows(4 + 2 * i, 6 + 2 * i), 2.5), (*rows(1 + i, 2 + i), 1.7)]
        value, grad = model.log_likelihood_and_grad_of_parts(theta, parts)
        for got_value, got_grad in (
            prepared.value_and_grad(theta),
            model.weighted_sum(parts).value_and_grad(theta),
        ):
            torch.testing.assert_close(got_value, value, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(got_grad, grad, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(prepared.grad(theta), grad, rtol=1e-12, atol=1e-12)
    assert len(model.stepwise_sums([], [(*rows(4, 10), 2.5)], 2)) == 2


INTERCEPT_ONLY = {
    family: {**config, "dim": 0}
    for family, config in CONFIGS.items()
    if family in ("linear_regression", "linear_regression_unknown_noise", "logistic_regression")
}


@pytest.mark.parametrize(
    ("family", "config"), [*CONFIGS.items(), *INTERCEPT_ONLY.items()], ids=str
)
def test_prepared_sums_compute_in_the_dtype_of_their_rows(
    family: str, config: dict, generator: torch.Generator
) -> None:
    """Rows and θ in float32 (the moves' gradient precision,
    ``modelcompare.estimators.online.precision``) give float32 sums within float32 rounding of the
    float64 ones."""
    model = build_model(family, **config)
    theta = model.sample_prior(5, generator)
    x, y = example_data(model, 12, generator)
    parts = [(x, y, 0.7)]
    low = [(None if x is None else x.float(), None if y is None else y.float(), 0.7)]
    value, grad = model.weighted_sum(parts).value_and_grad(theta)
    for prepared in (model.weighted_sum(low), model.stepwise_sums([], low, 1)[0]):
        low_value, low_grad = prepared.value_and_grad(theta.float())
        assert low_value.dtype == low_grad.dtype == prepared.grad(theta.float()).dtype
        assert low_grad.dtype == torch.float32
        torch.testing.assert_close(low_value.double(), value, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(low_grad.double(), grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("family", sorted(CONJUGATE))
def test_conjugate_oracle_contract(family: str, generator: torch.Generator) -> None:
    model = build_model(family, **CONFIGS[family])
    assert isinstance(model, ConjugateModel)
    prior = model.prior_stats()
    assert all(v.dtype == torch.float64 for v in prior.values())
    x, y = example_data(model, 9, generator)
    empty_x = None if x is None else x[:0]
    assert y is not None
    assert float(model.log_predictive(prior, empty_x, y[:0])) == pytest.approx(0.0, abs=1e-12)
    one_chunk = float(model.log_predictive(prior, x, y))
    assert one_chunk == pytest.approx(float(model.batch_log_evidence(x, y)), rel=1e-10)


def test_unknown_family_raises() -> None:
    with pytest.raises(ModelConfigError, match="unknown model family"):
        build_model("neural_network", dim=3)


@pytest.mark.parametrize(
    ("family", "config"),
    [
        ("linear_regression", {}),
        ("logistic_regression", {"dim": 2, "colours": 3}),
        ("gaussian_mixture", {"dim": 2}),
        ("gaussian_mixture", {"dim": 2, "components": 0}),
        ("beta_bernoulli", {"alpha": float("nan")}),
        ("gamma_poisson", {"rate": -1.0}),
        ("linear_regression_unknown_noise", {"dim": 1, "noise_scale": True}),
    ],
)
def test_bad_config_raises_model_config_error(family: str, config: dict) -> None:
    with pytest.raises(ModelConfigError):
        build_model(family, **config)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_the_cloud_spread_reads_every_family(family: str, generator: torch.Generator) -> None:
    """``relative_spread`` takes the log posterior's Hessian under torch.func: every family's
    log-likelihood and log prior must allow it. Prior draws against 300 rows are far wider
    than the posterior (a spread above 1); the same draws shrunk a millionfold about their mean
    read as frozen."""
    model = build_model(family, **CONFIGS[family])
    theta = model.sample_prior(64, generator)
    x, y = example_data(model, 300, generator)
    seen = RowsHistory(Rows(x, y))
    equal = torch.full((64,), -math.log(64), dtype=torch.float64)
    wide = relative_spread(model, theta, equal, seen, generator)
    assert math.isfinite(wide) and wide > 1
    shrunk = theta.mean(0) + 1e-6 * (theta - theta.mean(0))
    narrow = relative_spread(model, shrunk, equal, seen, generator)
    assert 0 < narrow < FROZEN
