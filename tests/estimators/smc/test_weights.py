"""Log-space weight arithmetic against direct numpy formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from modelcompare.estimators.smc.weights import (
    conditional_ess,
    ess,
    log_mean_exp,
    log_mean_increment,
    log_normalize,
)


def random_log_weights(m: int = 32, scale: float = 1.5, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(m, generator=g, dtype=torch.float64)


def test_log_normalize_sums_to_one() -> None:
    log_w = random_log_weights() - 800.0  # far below exp underflow: must still normalise
    assert float(torch.logsumexp(log_normalize(log_w), 0)) == pytest.approx(0.0, abs=1e-12)


def test_ess_extremes_and_formula() -> None:
    m = 32
    assert ess(torch.zeros(m, dtype=torch.float64)) == pytest.approx(m)
    one_hot = torch.full((m,), -1e4, dtype=torch.float64)
    one_hot[3] = 0.0
    assert ess(one_hot) == pytest.approx(1.0)
    log_w = random_log_weights()
    w = np.exp(log_w.numpy())
    w /= w.sum()
    assert ess(log_w) == pytest.approx(1.0 / (w**2).sum(), rel=1e-12)
    assert ess(log_w + 1234.5) == pytest.approx(ess(log_w), rel=1e-12)  # unnormalised is fine


def test_conditional_ess_formula() -> None:
    log_w, log_inc = random_log_weights(seed=1), random_log_weights(scale=3.0, seed=2)
    w = np.exp(log_w.numpy())
    w /= w.sum()
    inc = np.exp(log_inc.numpy())
    expected = len(w) * (w @ inc) ** 2 / (w @ inc**2)
    assert conditional_ess(log_w, log_inc) == pytest.approx(expected, rel=1e-10)
    # A constant increment changes nothing: CESS = M.
    assert conditional_ess(log_w, torch.full_like(log_w, -50.0)) == pytest.approx(len(w))


def test_log_mean_increment_and_its_variance() -> None:
    log_w, log_inc = random_log_weights(seed=3), random_log_weights(scale=2.0, seed=4)
    w = np.exp(log_w.numpy())
    w /= w.sum()
    inc = np.exp(log_inc.numpy())
    s = w @ inc
    value, variance = log_mean_increment(log_w, log_inc)
    assert value == pytest.approx(math.log(s), rel=1e-12)
    assert variance == pytest.approx(float((w**2 * (inc / s - 1.0) ** 2).sum()), rel=1e-10)
    # Shifting the increments by c shifts the log-mean by c and leaves the variance alone.
    shifted, shifted_var = log_mean_increment(log_w, log_inc - 700.0)
    assert shifted == pytest.approx(value - 700.0, rel=1e-12)
    assert shifted_var == pytest.approx(variance, rel=1e-9)
    # Constant increments carry no Monte Carlo error.
    assert log_mean_increment(log_w, torch.zeros_like(log_w))[1] == pytest.approx(0.0, abs=1e-20)


def test_log_mean_exp() -> None:
    values = random_log_weights(seed=5)
    expected = math.log(np.exp(values.numpy()).mean())
    assert log_mean_exp(values) == pytest.approx(expected, rel=1e-12)
