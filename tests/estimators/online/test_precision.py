"""The moves' gradients in float32: near the float64 sums, answered in the state's dtype, and
exact HMC stays exact whatever force steers its leapfrog."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators.data.history import InMemoryHistory, Rows
from modelcompare.estimators.moves.hmc import HMCParams, hmc_chain
from modelcompare.estimators.moves.sghmc import noise_factor, noise_friction
from modelcompare.estimators.online import precision
from modelcompare.estimators.online.dimension import REFERENCE_PARAMETERS
from modelcompare.estimators.online.kernels import sghmc
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import ExactTarget, Piece, past_data
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression, Model


def _parts(model: Model, rows: int, generator: torch.Generator) -> list:
    """Two weighted blocks of rows (a piece at λ = 0.4 and a past) the model accepts."""
    x = torch.randn(rows, 3, generator=generator, dtype=torch.float64)
    if isinstance(model, GaussianMixture):
        x, y = x[:, :2], None
    elif isinstance(model, LogisticRegression):
        y = torch.randint(0, model.classes, (rows,), generator=generator).to(torch.float64)
    else:
        y = x @ torch.tensor([0.5, -1.0, 0.2], dtype=torch.float64) + torch.randn(
            rows, generator=generator, dtype=torch.float64
        )
    half = rows // 2
    return [
        (x[:half], None if y is None else y[:half], 0.4),
        (x[half:], None if y is None else y[half:], 1.0),
    ]


@pytest.mark.parametrize(
    "model", [LinearRegression(3), LogisticRegression(3, classes=4), GaussianMixture(2, 3)]
)
def test_float32_sums_answer_in_float64_within_float32_rounding(model: Model) -> None:
    """Value and gradient of 400 weighted rows in float32 against float64: within 1e-5 of the
    gradient's scale (float32 rounds at 6e-8 per operation); in float64 the lowered sum is the
    model's own, to the bit."""
    g = torch.Generator().manual_seed(0)
    parts = _parts(model, 400, g)
    theta = 0.5 * torch.randn(5, model.param_dim, generator=g, dtype=torch.float64)
    exact = model.weighted_sum(parts)
    exact_value, exact_grad = exact.value_and_grad(theta)
    lowered = precision.weighted_sum(model, parts, torch.float32, exact)
    value, grad = lowered.value_and_grad(theta)
    assert value.dtype == grad.dtype == lowered.grad(theta).dtype == torch.float64
    scale = float(exact_grad.abs().max())
    assert float((grad - exact_grad).abs().max()) < 1e-5 * scale
    assert float((lowered.grad(theta) - exact_grad).abs().max()) < 1e-5 * scale
    assert float(((value - exact_value) / exact_value).abs().max()) < 1e-5
    assert float((grad - exact_grad).abs().max()) > 0.0  # it did compute in float32
    same = precision.weighted_sum(model, parts, torch.float64, exact).value_and_grad(theta)
    assert torch.equal(same[0], exact_value) and torch.equal(same[1], exact_grad)


def test_large_models_take_their_mass_products_and_sums_in_the_gradients_dtype() -> None:
    """Past ``REFERENCE_PARAMETERS`` the mass products compute in the requested dtype, and so do
    the sums of a model whose gradients do not read rows; at or below it both stay float64 (the
    small models' streams are bit for bit as before), while a model whose gradients read rows
    takes the requested dtype for its gradients at any size."""
    f32, f64 = torch.float32, torch.float64
    small = LinearRegression(REFERENCE_PARAMETERS - 1)
    large = LinearRegression(REFERENCE_PARAMETERS)
    assert (small.param_dim, large.param_dim) == (REFERENCE_PARAMETERS, REFERENCE_PARAMETERS + 1)
    assert precision.mass_dtype(small, f32) == precision.gradient_dtype(small, f32) == f64
    assert precision.mass_dtype(large, f32) == precision.gradient_dtype(large, f32) == f32
    logistic = LogisticRegression(3, classes=4)
    assert (precision.gradient_dtype(logistic, f32), precision.mass_dtype(logistic, f32)) == (
        f32, f64)
    assert precision.mass_dtype(large, f64) == precision.gradient_dtype(large, f64) == f64


@pytest.mark.slow
def test_exact_hmc_steered_by_a_wrong_force_still_samples_the_posterior() -> None:
    """Exact HMC whose inner leapfrog kicks read a force 60% too strong (``ExactTarget.grad``:
    the rows at weight 1.6) still leaves the exact conjugate posterior invariant: the leapfrog
    stays reversible and volume-preserving, and the Metropolis test reads the true log π (what
    makes float32 steering safe). Started from 20,000 exact draws, after 5 transitions the
    moments are those of the posterior within 5 Monte Carlo standard errors, while the
    acceptance shows the wrong force at work."""
    g = torch.Generator().manual_seed(1)
    model = LinearRegression(2)
    x = torch.randn(200, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0], dtype=torch.float64) + 0.3
    y = y + torch.randn(200, generator=g, dtype=torch.float64)
    stats = model.update_stats(model.prior_stats(), x, y)
    cov = torch.linalg.inv(stats["precision"])
    mean, factor = cov @ stats["shift"], torch.linalg.cholesky(cov)
    draws = 20_000
    theta = mean + torch.randn(draws, 3, generator=g, dtype=torch.float64) @ factor.T
    right = model.weighted_sum([(x, y, 1.0)])
    params = HMCParams(step_scale=0.4, leapfrog_steps=10, transitions=5)
    acceptance = {}
    for name, steering in (("right", right), ("wrong", model.weighted_sum([(x, y, 1.6)]))):
        target = ExactTarget(model, right, steering)
        moved, acceptance[name] = hmc_chain(
            theta, target.value_and_grad, factor, params, g, target.grad
        )
    assert sum(acceptance["wrong"]) < 0.9 * sum(acceptance["right"])
    white = torch.linalg.solve_triangular(factor, (moved - mean).T, upper=False).T
    assert float(white.mean(0).abs().max()) < 5 / draws**0.5
    second = white.T @ white / draws  # I for the posterior; an entry's standard error ≈ √(2/n)
    assert float((second - torch.eye(3, dtype=torch.float64)).abs().max()) < 5 * (2 / draws) ** 0.5


@pytest.mark.slow
def test_float32_noise_friction_falls_back_to_float64_beyond_its_range() -> None:
    """A gradient-noise factor whose squares overflow float32 (entries 1e20) gives the friction
    float64 gives, finite; before the fallback its eigenvalues came out of an inf matrix."""
    g = torch.Generator().manual_seed(3)
    for rows in (3, 12):  # the R × D factor form and the D × D matrix form
        noise = torch.randn(4, rows, 6, generator=g, dtype=torch.float64) * 1e20
        velocity = torch.randn(4, 6, generator=g, dtype=torch.float64)
        applied = noise_friction(noise_factor(noise.float()), 0.2, 0.9)(velocity)
        expected = noise_friction(noise_factor(noise), 0.2, 0.9)(velocity)
        assert applied.dtype == torch.float64 and bool(torch.isfinite(applied).all())
        torch.testing.assert_close(applied, expected, rtol=1e-5, atol=0.0)


@pytest.mark.slow
def test_sghmc_on_gradients_beyond_float32_takes_its_noise_in_float64() -> None:
    """A mixture particle with a component of variance e^-100 has row gradients near 1e43, past
    float32's 3e38: the move's noise estimate is taken again in float64, and the move runs (its
    trajectory diverges and is undone, as in float64)."""
    g = torch.Generator().manual_seed(4)
    model = GaussianMixture(2, 3)
    history = InMemoryHistory(2, has_y=False)
    history.append(Rows(torch.randn(300, 2, generator=g, dtype=torch.float64), None))
    piece = Rows(torch.randn(50, 2, generator=g, dtype=torch.float64), None)
    theta = 0.3 * torch.randn(8, model.param_dim, generator=g, dtype=torch.float64)
    theta[0, -1] = -100.0  # log σ² of the last component's second coordinate
    past = past_data(history, 100, 50, None)
    params = SGAISSettings().sghmc
    scale = torch.eye(model.param_dim, dtype=torch.float64) * 0.1
    moves = {}
    for dtype in (torch.float32, torch.float64):
        move = sghmc(Piece(model, piece, past), params, dtype)
        moves[dtype] = move(theta, 0.5, scale, torch.Generator().manual_seed(5), lambda: None)
    assert bool(torch.isfinite(moves[torch.float32].particles).all())
    assert torch.equal(moves[torch.float32].particles[0], theta[0])
    assert torch.equal(moves[torch.float64].particles[0], theta[0])
