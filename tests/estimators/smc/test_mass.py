"""The moves' mass rules: a step's own cloud, or the clouds of earlier steps pooled with it,
checked against a known covariance (the pooled estimate is the closer one) and the exact
bookkeeping of the pool's degrees of freedom."""

from __future__ import annotations

import torch

from modelcompare.estimators.smc.covariance import (
    covariance_factor,
    particle_scale,
    weighted_covariance,
)
from modelcompare.estimators.smc.mass import NO_POOL, mass_rule, particle_mass, pooled_mass


def cloud(particles: int, truth: torch.Tensor, seed: int) -> torch.Tensor:
    """``particles`` draws from N(0, diag(truth))."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(particles, truth.shape[0], generator=g, dtype=torch.float64) * truth.sqrt()


def equal_weights(particles: int) -> torch.Tensor:
    return torch.full((particles,), -torch.log(torch.tensor(float(particles))).item(),
                      dtype=torch.float64)


def test_the_step_s_own_cloud_leaves_the_pool_as_it_was() -> None:
    theta = cloud(32, torch.ones(5, dtype=torch.float64), 0)
    factor, pool = particle_mass(theta, equal_weights(32), NO_POOL)
    assert torch.equal(factor, particle_scale(theta, equal_weights(32)))
    assert pool is NO_POOL
    assert mass_rule(1) is particle_mass


def test_the_first_pooled_step_is_the_step_s_own_cloud() -> None:
    theta = cloud(32, torch.ones(5, dtype=torch.float64), 1)
    weights = torch.log_softmax(torch.linspace(0.0, 1.0, 32, dtype=torch.float64), 0)
    factor, pool = pooled_mass(8)(theta, weights, NO_POOL)
    assert torch.equal(factor, particle_scale(theta, weights))
    assert torch.equal(pool.covariance, weighted_covariance(theta, weights))
    assert float(pool.inverse_samples) == 1 / 31


def test_the_pool_averages_at_rate_two_over_k_plus_one_and_counts_its_samples() -> None:
    """P ← (1 − ρ) P + ρ S and Σ w²/s ← (1 − ρ)² Σ w²/s + ρ²/s, ρ = 2/(K + 1): after many
    steps of s = M − 1 each the pool counts K (M − 1) samples."""
    truth, rule, pool = torch.ones(4, dtype=torch.float64), pooled_mass(5), NO_POOL
    rate = 2 / 6
    for seed in range(200):
        theta = cloud(16, truth, seed)
        before = pool
        _, pool = rule(theta, equal_weights(16), pool)
        if seed:
            expected = (1 - rate) * before.covariance + rate * weighted_covariance(
                theta, equal_weights(16))
            torch.testing.assert_close(pool.covariance, expected, rtol=1e-15, atol=0)
    assert abs(1 / float(pool.inverse_samples) - 5 * 15) < 1e-9


def test_pooled_clouds_estimate_a_covariance_better_than_one_when_d_exceeds_m() -> None:
    """D = 40 parameters, M = 16 particles a cloud: the mass matrix of eight pooled independent
    clouds is closer to the truth (relative Frobenius error) than any single cloud's."""
    dim, particles = 40, 16
    truth = torch.linspace(0.5, 2.0, dim, dtype=torch.float64)
    rule, pool, singles = pooled_mass(8), NO_POOL, []
    for seed in range(24):
        theta = cloud(particles, truth, seed)
        factor, pool = rule(theta, equal_weights(particles), pool)
        single = particle_scale(theta, equal_weights(particles))
        singles.append(float(torch.linalg.matrix_norm(single @ single.T - torch.diag(truth))))
    pooled_error = float(torch.linalg.matrix_norm(factor @ factor.T - torch.diag(truth)))
    assert pooled_error < min(singles), (pooled_error, min(singles))


def test_a_cloud_of_another_dimension_starts_the_pool_again() -> None:
    _, pool = pooled_mass(4)(cloud(16, torch.ones(3, dtype=torch.float64), 0),
                             equal_weights(16), NO_POOL)
    theta = cloud(16, torch.ones(5, dtype=torch.float64), 1)
    _, again = pooled_mass(4)(theta, equal_weights(16), pool)
    assert torch.equal(again.covariance, weighted_covariance(theta, equal_weights(16)))


def test_a_pooled_step_moves_with_the_earlier_clouds_alone() -> None:
    """Past the first step the factor is the pool's before the step's own cloud joins it: two
    clouds moved from the same pool get the same factor, the covariance of the clouds before
    them (shrunk for their degrees of freedom), while the pool they hand on holds each."""
    truth, rule = torch.ones(5, dtype=torch.float64), pooled_mass(4)
    _, pool = rule(cloud(16, truth, 0), equal_weights(16), NO_POOL)
    first, after_first = rule(cloud(16, truth, 1), equal_weights(16), pool)
    second, after_second = rule(cloud(16, truth * 9, 2), equal_weights(16), pool)
    assert torch.equal(first, second)
    assert torch.equal(first, covariance_factor(pool.covariance, 15))
    assert not torch.equal(after_first.covariance, after_second.covariance)
