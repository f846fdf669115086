"""Resampling schemes: valid ancestors, and E[#copies of i] = M·W_i for every scheme."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators.smc.resampling import RESAMPLERS, resample_to

M = 16
# torch.repeat_interleave (inside residual) costs ~8 ms per call with 2 intra-op threads on a
# busy 2-core box, so residual gets fewer draws; its tolerance widens accordingly.
DRAWS = {"systematic": 4000, "stratified": 4000, "multinomial": 4000, "residual": 600}


def skewed_weights() -> torch.Tensor:
    """Weights spanning tiny (M·W ≪ 1), fractional and multi-copy (M·W > 2) particles."""
    g = torch.Generator().manual_seed(7)
    log_w = 2.0 * torch.randn(M, generator=g, dtype=torch.float64)
    return torch.softmax(log_w, 0)


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_ancestors_are_valid(scheme: str) -> None:
    weights = skewed_weights()
    g = torch.Generator().manual_seed(1)
    ancestors = RESAMPLERS[scheme](weights, g)
    assert ancestors.shape == (M,) and ancestors.dtype == torch.long
    assert int(ancestors.min()) >= 0 and int(ancestors.max()) < M


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_copy_counts_are_unbiased(scheme: str) -> None:
    weights = skewed_weights()
    expected = M * weights
    g = torch.Generator().manual_seed(2)
    counts = torch.zeros(M, dtype=torch.float64)
    draws = DRAWS[scheme]
    for _ in range(draws):
        counts += torch.bincount(RESAMPLERS[scheme](weights, g), minlength=M)
    mean = counts / draws
    # Per draw, the copy count of i has variance at most the multinomial one, M·W_i·(1 − W_i):
    # stratified and residual never exceed it (Douc, Cappé & Moulines 2005, sec. 3), and
    # systematic gives floor or ceil of M·W_i, variance f(1 − f) ≤ M·W_i(1 − W_i) for f its
    # fractional part. So the Monte Carlo standard error of the mean over DRAWS draws is at most
    # sqrt(M·W(1 − W)/draws); 4.5 of those over 16 particles × 4 schemes leaves a false-alarm
    # chance below 1e-3, while a bias of 0.15 copies (0.4 for residual) in any particle is caught.
    stderr = torch.sqrt(expected * (1.0 - weights) / draws)
    z = (mean - expected).abs() / stderr
    assert float(z.max()) < 4.5, f"{scheme}: worst z {float(z.max()):.2f}"
    assert math.isclose(float(mean.sum()), M)


@pytest.mark.parametrize("scheme", ["systematic", "residual"])
def test_low_variance_schemes_keep_the_integer_part(scheme: str) -> None:
    """Systematic and residual always keep at least floor(M·W_i) copies of particle i."""
    weights = skewed_weights()
    g = torch.Generator().manual_seed(3)
    floor = torch.floor(M * weights)
    for _ in range(200 if scheme == "systematic" else 40):
        counts = torch.bincount(RESAMPLERS[scheme](weights, g), minlength=M)
        assert bool((counts >= floor).all())


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_degenerate_weights(scheme: str) -> None:
    weights = torch.zeros(M, dtype=torch.float64)
    weights[5] = 1.0
    g = torch.Generator().manual_seed(4)
    assert bool((RESAMPLERS[scheme](weights, g) == 5).all())
    uniform = torch.full((M,), 1.0 / M, dtype=torch.float64)
    counts = torch.bincount(RESAMPLERS[scheme](uniform, g), minlength=M)
    if scheme in ("systematic", "stratified", "residual"):
        assert bool((counts == 1).all())  # no randomness left for equal weights
    assert int(counts.sum()) == M


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
@pytest.mark.parametrize("count", [5, 40])
def test_a_sample_count_other_than_m_is_unbiased(scheme: str, count: int) -> None:
    """``count`` ancestors from M weights: E[#copies of i] = count·W_i (what the references use
    to keep a fixed number of equal-weight points from a run's weighted samples)."""
    weights = skewed_weights()
    g = torch.Generator().manual_seed(3)
    draws = 600
    counts = torch.zeros(M, dtype=torch.float64)
    for _ in range(draws):
        ancestors = RESAMPLERS[scheme](weights, g, count)
        assert ancestors.shape == (count,) and int(ancestors.max()) < M
        counts += torch.bincount(ancestors, minlength=M)
    expected = count * weights
    stderr = torch.sqrt(expected * (1.0 - weights) / draws)  # the multinomial bound, as above
    assert float(((counts / draws - expected).abs() / stderr.clamp_min(1e-3)).max()) < 4.5


def test_resample_to_changes_the_population() -> None:
    """``resample_to`` draws ``count`` particles with equal weights whatever the ESS."""
    particles = torch.arange(4, dtype=torch.float64)[:, None]
    log_weights = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    selected = resample_to(10, RESAMPLERS["systematic"])(
        particles, log_weights, 3.9, torch.Generator().manual_seed(0)
    )
    assert selected.resampled and selected.particles.shape == (10, 1)
    assert selected.ancestors is not None
    assert selected.ancestors.bincount(minlength=4).tolist() == [1, 2, 3, 4]
    torch.testing.assert_close(
        selected.log_weights.exp(), torch.full((10,), 0.1, dtype=torch.float64)
    )
