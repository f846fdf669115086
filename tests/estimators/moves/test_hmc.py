"""The full-batch HMC move leaves its target invariant (it is Metropolis-corrected)."""

from __future__ import annotations

import torch

from modelcompare.estimators.moves.hmc import transition


def _gaussian_target(precision: torch.Tensor):
    def log_target(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad = -theta @ precision
        return 0.5 * (grad * theta).sum(-1), grad

    return log_target


def test_hmc_preserves_a_correlated_gaussian(generator: torch.Generator) -> None:
    # Target N(0, Σ) with correlation 0.9; start from exact draws, apply moves with a deliberately
    # large step (acceptance well below 1), and check the moments are unchanged.
    cov = torch.tensor([[4.0, 0.18], [0.18, 0.01]], dtype=torch.float64)  # ρ = 0.9
    chol = torch.linalg.cholesky(cov)
    m = 20000
    theta = torch.randn(m, 2, generator=generator, dtype=torch.float64) @ chol.T
    scale = cov.diagonal().sqrt().diag()  # a diagonal mass: the correlation is left to HMC
    acceptance = []
    for _ in range(5):
        moved = transition(
            theta, _gaussian_target(torch.linalg.inv(cov)), scale, 0.6, 10, generator
        )
        theta = moved.position
        acceptance.append(moved.acceptance)
    assert 0.3 < sum(acceptance) / len(acceptance) < 0.99  # the correction is doing work
    sample_cov = torch.cov(theta.T)
    # Monte Carlo standard error of a variance estimate from m draws is var·sqrt(2/m) ≈ 1% here
    # (the chain starts in stationarity, so draws stay marginally exact); allow 5 standard errors.
    relative = (sample_cov - cov).abs() / cov.diagonal().sqrt().outer(cov.diagonal().sqrt())
    assert float(relative.max()) < 5 * (2 / m) ** 0.5
    assert float(theta.mean(0).div(cov.diagonal().sqrt()).abs().max()) < 5 / m**0.5


def test_hmc_from_a_wrong_start_converges(generator: torch.Generator) -> None:
    precision = torch.eye(3, dtype=torch.float64) * 100.0  # N(0, 0.01 I)
    theta = 3.0 + torch.randn(4000, 3, generator=generator, dtype=torch.float64)
    scale = 0.1 * torch.eye(3, dtype=torch.float64)
    for _ in range(30):
        theta = transition(theta, _gaussian_target(precision), scale, 0.3, 10, generator).position
    assert float(theta.mean(0).abs().max()) < 0.01
    assert float((theta.var(0) / 0.01 - 1).abs().max()) < 0.15


def test_a_float32_mass_factor_keeps_hmc_exact(generator: torch.Generator) -> None:
    """The leapfrog's products with L computed in float32 (``metric``, as ``precision.mass_dtype``
    asks for large models) leave the chain exact: positions, log π and gradients come back in
    float64, the moments of N(0, Σ) are kept within 5 Monte Carlo standard errors, and the
    acceptance is float64's to float32's resolution."""
    cov = torch.tensor([[4.0, 0.18], [0.18, 0.01]], dtype=torch.float64)
    chol = torch.linalg.cholesky(cov)
    m = 20000
    theta = torch.randn(m, 2, generator=generator, dtype=torch.float64) @ chol.T
    target = _gaussian_target(torch.linalg.inv(cov))
    seed = int(torch.randint(2**31, (1,), generator=generator))
    wide = transition(theta, target, chol, 0.6, 10, torch.Generator().manual_seed(seed))
    narrow = transition(theta, target, chol.float(), 0.6, 10, torch.Generator().manual_seed(seed))
    assert narrow.position.dtype == narrow.log_target.dtype == narrow.grad.dtype == torch.float64
    assert 0.0 < float((narrow.position - wide.position).abs().max()) < 1e-4
    assert abs(narrow.acceptance - wide.acceptance) < 1e-3
    sample_cov = torch.cov(narrow.position.T)
    relative = (sample_cov - cov).abs() / cov.diagonal().sqrt().outer(cov.diagonal().sqrt())
    assert float(relative.max()) < 5 * (2 / m) ** 0.5
