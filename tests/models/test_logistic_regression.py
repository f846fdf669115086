"""LogisticRegression (softmax, K classes) against scipy and autograd."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.logistic_regression import LogisticRegression


def make_data(generator: torch.Generator, rows: int, dim: int, classes: int):
    x = torch.randn(rows, dim, generator=generator, dtype=torch.float64)
    y = torch.randint(0, classes, (rows,), generator=generator).to(torch.float64)
    return x, y


def numpy_logits(theta: torch.Tensor, x: torch.Tensor, classes: int) -> np.ndarray:
    """(M, R, K) from the documented layout: one (w_k, c_k) block of dim + 1 per class."""
    blocks = theta.numpy().reshape(theta.shape[0], classes, -1)
    weights, biases = blocks[:, :, :-1], blocks[:, :, -1]
    return np.einsum("mkd,rd->mrk", weights, x.numpy()) + biases[:, None, :]


def test_log_prior_matches_scipy(generator: torch.Generator) -> None:
    model = LogisticRegression(3, classes=4)
    theta = torch.randn(5, 16, generator=generator, dtype=torch.float64) * 2
    expected = stats.norm.logpdf(theta.numpy()).sum(1)
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-12)
    torch.testing.assert_close(model.grad_log_prior(theta), Model.grad_log_prior(model, theta))


def test_log_likelihood_matches_log_softmax(generator: torch.Generator) -> None:
    model = LogisticRegression(3, classes=4)
    x, y = make_data(generator, 30, 3, 4)
    theta = torch.randn(6, model.param_dim, generator=generator, dtype=torch.float64) * 3
    log_probs = special.log_softmax(numpy_logits(theta, x, 4), axis=-1)
    expected = np.take_along_axis(log_probs, y.long().numpy()[None, :, None], axis=-1)[..., 0]
    np.testing.assert_allclose(model.log_likelihood(theta, x, y).numpy(), expected, rtol=1e-12)


def test_two_classes_is_bernoulli_on_logit_difference(generator: torch.Generator) -> None:
    model = LogisticRegression(2, classes=2)
    x, y = make_data(generator, 20, 2, 2)
    theta = torch.randn(4, model.param_dim, generator=generator, dtype=torch.float64)
    logits = numpy_logits(theta, x, 2)
    expected = stats.bernoulli.logpmf(y.numpy(), special.expit(logits[..., 1] - logits[..., 0]))
    np.testing.assert_allclose(model.log_likelihood(theta, x, y).numpy(), expected, rtol=1e-10)


def test_intercept_only_model_is_categorical(generator: torch.Generator) -> None:
    """dim 0: p(y = k) = softmax(c)_k, no inputs."""
    model = LogisticRegression(0, classes=3)
    assert (model.input_dim, model.param_dim) == (0, 3)
    y = torch.tensor([0.0, 2.0, 2.0, 1.0], dtype=torch.float64)
    model.validate_data(None, y)
    theta = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    expected = special.log_softmax(theta.numpy(), axis=-1)[:, y.long().numpy()]
    np.testing.assert_allclose(model.log_likelihood(theta, None, y).numpy(), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="integer labels"):
        model.validate_data(None, torch.tensor([3.0], dtype=torch.float64))


@pytest.mark.parametrize(("dim", "classes"), [(1, 2), (3, 4)])
def test_grad_log_likelihood_matches_autograd(
    generator: torch.Generator, dim: int, classes: int
) -> None:
    model = LogisticRegression(dim, classes=classes)
    x, y = make_data(generator, 25, dim, classes)
    theta = torch.randn(7, model.param_dim, generator=generator, dtype=torch.float64) * 2
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, x, y, row_weight=1.7),
        Model.grad_log_likelihood(model, theta, x, y, row_weight=1.7),
        rtol=1e-10,
        atol=1e-12,
    )


def test_extreme_logits_stay_finite(generator: torch.Generator) -> None:
    model = LogisticRegression(2, classes=3)
    x, y = make_data(generator, 10, 2, 3)
    theta = 500.0 * torch.randn(3, model.param_dim, generator=generator, dtype=torch.float64)
    assert torch.isfinite(model.log_likelihood(theta, x, y)).all()
    assert torch.isfinite(model.grad_log_likelihood(theta, x, y)).all()


def test_sample_prior_moments(generator: torch.Generator) -> None:
    model = LogisticRegression(2, classes=3)
    n = 20_000
    draws = model.sample_prior(n, generator)
    assert draws.shape == (n, 9)
    # N(0, 1): 5 standard errors, 1/√n for the mean and √(2/n) for the variance.
    assert draws.mean(0).abs().max() < 5 / math.sqrt(n)
    assert (draws.var(0) - 1).abs().max() < 5 * math.sqrt(2 / n)


def test_predict_averages_probabilities_over_weights(generator: torch.Generator) -> None:
    model = LogisticRegression(2, classes=3)
    x, _ = make_data(generator, 5, 2, 3)
    theta = torch.randn(4, model.param_dim, generator=generator, dtype=torch.float64)
    log_weights = torch.tensor([0.0, 1.0, -2.0, 0.5], dtype=torch.float64) + 10.0
    probs = model.predict(theta, log_weights, x).probabilities
    assert probs is not None and probs.shape == (5, 3)
    weights = special.softmax(log_weights.numpy())
    expected = np.einsum("m,mrk->rk", weights, special.softmax(numpy_logits(theta, x, 3), -1))
    np.testing.assert_allclose(probs.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(probs.sum(1).numpy(), 1.0, rtol=1e-12)


@pytest.mark.parametrize(
    "labels",
    [[0.0, 3.0], [0.0, -1.0], [0.5, 1.0], [float("nan"), 1.0], [float("inf"), 0.0]],
)
def test_validate_rejects_bad_labels(labels: list[float]) -> None:
    model = LogisticRegression(1, classes=3)
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(2, 1, dtype=torch.float64), torch.tensor(labels))


def test_validate_accepts_good_labels_and_checks_shapes() -> None:
    model = LogisticRegression(1, classes=3)
    x = torch.zeros(3, 1, dtype=torch.float64)
    model.validate_data(x, torch.tensor([0.0, 2.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        model.validate_data(x, torch.tensor([0.0, 2.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3))


@pytest.mark.parametrize(
    "config",
    [
        {"dim": -1},
        {"dim": True},
        {"dim": 2, "classes": 1},
        {"dim": 2, "classes": 0},
        {"dim": 2, "classes": True},
        {"dim": 2, "classes": 2.5},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        LogisticRegression(**config)


def test_config_round_trip() -> None:
    model = LogisticRegression(5, classes=4)
    assert model.param_dim == 24
    assert LogisticRegression(**model.config()).config() == {"dim": 5, "classes": 4}
