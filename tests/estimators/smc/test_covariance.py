"""The moves' mass matrix against known covariances: the shrinkage pulls the sample spectrum
back towards the truth's, and leaves a well-sampled covariance as it is."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators.smc.covariance import (
    MIN_SHRINKAGE_SAMPLES,
    particle_scale,
    shrunk_covariance,
)


def cloud(particles: int, truth: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """``particles`` draws from N(0, diag(truth))."""
    g = torch.Generator().manual_seed(seed)
    draws = torch.randn(particles, truth.shape[0], generator=g, dtype=torch.float64)
    return draws * truth.sqrt()


def whitened_spectrum(cov: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of Σ^(-1/2) cov Σ^(-1/2) for Σ = diag(truth): all 1 for a perfect estimate."""
    root = truth.rsqrt()
    return torch.linalg.eigvalsh(root[:, None] * cov * root[None, :])


def mass_matrix(theta: torch.Tensor) -> torch.Tensor:
    factor = particle_scale(theta, torch.zeros(theta.shape[0], dtype=theta.dtype))
    return factor @ factor.T


@pytest.mark.parametrize("dim", [44, 80])  # fewer parameters than particles, and more
def test_the_shrinkage_undoes_the_sample_spectrum_s_spread(dim: int) -> None:
    truth = torch.linspace(0.5, 2.0, dim, dtype=torch.float64)
    theta = cloud(64, truth)
    sample = torch.cov(theta.T, correction=0)
    shrunk = mass_matrix(theta)
    raw, fixed = whitened_spectrum(sample, truth), whitened_spectrum(shrunk, truth)
    assert float(raw.min()) < 0.05  # Marchenko–Pastur: (1 − √(44/63))² ≈ 0.03, or rank-deficient
    assert float(fixed.min()) > 0.4 and float(fixed.max()) < 3.0
    assert frobenius_error(shrunk, truth) < 0.5 * frobenius_error(sample, truth)


def test_many_particles_leave_the_covariance_as_sampled() -> None:
    """c = 3 / 20,000: the sample spectrum is right to ±2√c ≈ ±2.4%, and the shrinkage changes
    no direction's variance by more than a fifth of that."""
    truth = torch.tensor([1.0, 4.0, 0.25], dtype=torch.float64)
    theta = cloud(20_000, truth)
    sample = torch.cov(theta.T, correction=0)
    inverse_root = torch.linalg.inv(torch.linalg.cholesky(sample))
    change = torch.linalg.eigvalsh(inverse_root @ mass_matrix(theta) @ inverse_root.T)
    assert float((change - 1).abs().max()) < 0.005


def test_coinciding_particles_still_get_a_mass_matrix() -> None:
    theta = torch.full((64, 5), 2.0, dtype=torch.float64)
    factor = particle_scale(theta, torch.zeros(64, dtype=torch.float64))
    assert torch.isfinite(factor).all() and bool((factor.diagonal() > 0).all())


def test_the_shrinkage_does_not_depend_on_the_coordinates_scales() -> None:
    truth = torch.linspace(0.5, 2.0, 30, dtype=torch.float64)
    theta = cloud(64, truth, seed=3)
    units = torch.logspace(-3, 3, 30, dtype=torch.float64)
    rescaled = mass_matrix(theta * units)
    torch.testing.assert_close(rescaled, mass_matrix(theta) * units[:, None] * units[None, :])


def test_correlations_are_kept() -> None:
    """A non-identified direction (x₁ + x₂ almost fixed) stays narrow after the shrinkage."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(64, 2, generator=g, dtype=torch.float64)
    theta = torch.stack([z[:, 0] * 10 + 0.01 * z[:, 1], -z[:, 0] * 10 + 0.01 * z[:, 1]], 1)
    cov = mass_matrix(theta)
    direction = torch.tensor([1.0, 1.0], dtype=torch.float64) / 2**0.5
    assert float(direction @ cov @ direction) < 1e-3 * float(cov.diagonal().mean())


def test_weights_shape_the_covariance() -> None:
    theta = torch.tensor([[-1.0], [1.0], [3.0]], dtype=torch.float64)
    log_weights = torch.tensor([0.0, 0.0, -1e9], dtype=torch.float64)
    factor = particle_scale(theta, log_weights)
    assert float(factor[0, 0] ** 2) == pytest.approx(1.0, rel=1e-6)  # the third has no weight


def test_too_few_samples_keep_the_sample_covariance() -> None:
    cov = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(
        shrunk_covariance(cov, MIN_SHRINKAGE_SAMPLES - 1), cov, rtol=1e-8, atol=0.0
    )  # only the relative jitter of 1e-9


def test_copies_of_a_few_particles_get_a_usable_mass_matrix() -> None:
    """64 particles that are copies of 20 (no move separated them) span 19 of 25 directions: the
    shrinkage reads 19 samples' worth of spectrum, and keeps the total variance."""
    truth = torch.linspace(0.5, 2.0, 25, dtype=torch.float64)
    distinct = cloud(20, truth, seed=5)
    theta = distinct[torch.arange(64) % 20]
    cov = mass_matrix(theta)
    sample = torch.cov(theta.T, correction=0)
    assert bool((torch.linalg.eigvalsh(cov) > 0).all())
    assert float(cov.trace() / sample.trace()) == pytest.approx(1.0, abs=0.5)
    assert frobenius_error(cov, truth) < frobenius_error(sample, truth)


def frobenius_error(cov: torch.Tensor, truth: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(cov - torch.diag(truth)))


def test_as_many_parameters_as_samples() -> None:
    """D = M − 1 = 63: no null direction (the D ≥ n formula without its null part). The edge of
    the spectrum sits at 0 here, so the smallest directions stay narrow, but 300× less so."""
    truth = torch.linspace(0.5, 2.0, 63, dtype=torch.float64)
    theta = cloud(64, truth)
    sample = torch.cov(theta.T, correction=0)
    shrunk = mass_matrix(theta)
    assert float(whitened_spectrum(sample, truth).min()) < 1e-3
    assert float(whitened_spectrum(shrunk, truth).min()) > 0.02
    assert frobenius_error(shrunk, truth) < 0.5 * frobenius_error(sample, truth)
