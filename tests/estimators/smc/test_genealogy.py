"""The Eve-group variance of a run of tempered-SMC steps: its exact identities without
resampling, its calibration against the spread of log Ẑ over repeated runs with resampling, and
the Eves of a cloud selected from a larger one."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation, selected
from modelcompare.estimators.smc.resampling import RESAMPLERS, resample_below
from modelcompare.estimators.smc.tempered import StepInfo, anneal, start
from modelcompare.estimators.smc.weights import log_mean_increment
from tests.estimators.smc.test_tempered import coin, parts

F64 = torch.float64


def test_one_step_is_the_delta_method_variance() -> None:
    g = torch.Generator().manual_seed(0)
    log_weights = torch.log_softmax(torch.randn(300, generator=g, dtype=F64), 0)
    increments = 2.0 * torch.randn(300, generator=g, dtype=F64)
    _, delta = log_mean_increment(log_weights, increments)
    step = StepInfo(0.0, delta, 0.0, False, (), torch.log_softmax(log_weights + increments, 0))
    assert eve_variance(first_generation(log_weights), [step]) == pytest.approx(delta, rel=1e-12)


def test_without_resampling_it_is_the_delta_method_of_the_whole_product() -> None:
    """No resampling, no moves: the run is importance sampling with weights p(y | θ_i), so the
    variance is Σ_i (W_i − 1/M)², not the (smaller) sum of the per-step variances."""
    model, theta, y = coin(40, 0)
    m = theta.shape[0]
    smc = parts(model, y)
    uniform = torch.full((m,), -math.log(m), dtype=F64)
    _, steps = anneal(smc, start(smc, theta, uniform), torch.Generator(), 100)
    final = torch.softmax(model.log_likelihood(theta, None, y).sum(-1), 0)
    expected = float(((final - 1.0 / m) ** 2).sum())
    assert len(steps) > 2
    assert eve_variance(first_generation(uniform), steps) == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_with_resampling_it_matches_the_spread_of_log_z_over_runs() -> None:
    """Resampling without moves leaves copies that share their Eve's fate: the Eve-group variance
    tracks the replicate variance of log Ẑ, while the per-step sum falls well short of it."""
    model, _, y = coin(60, 1)
    m, runs = 100, 300
    smc = parts(model, y, selection=resample_below(0.5, RESAMPLERS["multinomial"]))
    uniform = torch.full((m,), -math.log(m), dtype=F64)
    g = torch.Generator().manual_seed(7)
    estimates, eve, delta = [], [], []
    for _ in range(runs):
        theta = model.sample_prior(m, g)
        _, steps = anneal(smc, start(smc, theta, uniform), g, 200)
        assert any(s.resampled for s in steps)
        estimates.append(sum(s.log_evidence_increment for s in steps))
        eve.append(eve_variance(first_generation(uniform), steps))
        delta.append(sum(s.log_evidence_increment_variance for s in steps))
    replicate = statistics.variance(estimates)
    assert statistics.fmean(eve) / replicate == pytest.approx(1.0, abs=0.3)
    assert statistics.fmean(delta) < 0.8 * statistics.fmean(eve)


def test_selected_eves_fold_the_selection_into_the_run() -> None:
    """Eves taken before a selection from 4M particles to M give what the unfolded genealogy
    gives: the 4M particles as Eves and the selection as the run's first step."""
    model, _, y = coin(30, 2)
    m = 50
    g = torch.Generator().manual_seed(3)
    wide_theta = model.sample_prior(4 * m, g)
    wide = torch.log_softmax(torch.randn(4 * m, generator=g, dtype=F64), 0)
    ancestors = RESAMPLERS["systematic"](torch.exp(wide), g, m)
    smc = parts(model, y, selection=resample_below(0.5, RESAMPLERS["multinomial"]))
    uniform = torch.full((m,), -math.log(m), dtype=F64)
    _, steps = anneal(smc, start(smc, wide_theta[ancestors], uniform), g, 100)
    eves = selected(wide, ancestors)
    assert eves.labels.shape == (m,) and eves.weights.shape[0] == len(set(ancestors.tolist()))
    selection = StepInfo(0.0, 0.0, 0.0, True, (), wide, ancestors)
    unfolded = eve_variance(first_generation(wide), [selection, *steps])
    assert eve_variance(eves, steps) == pytest.approx(unfolded, rel=1e-12)
    assert eve_variance(eves, steps) > eve_variance(first_generation(uniform), steps)


def test_carried_eves_sum_to_the_genealogy_of_both_pieces() -> None:
    """Piece 1 weights 4M prior draws by its rows; M of them are selected; piece 2 anneals its
    rows from those M. Summed over the two pieces, Eves carried across the selection give about
    what one genealogy over both pieces gives (Eves at the 4M draws; Chan & Lai's estimator of
    the whole run). Eves restarted at the M copies leave the selection's noise out."""
    model, _, y = coin(60, 4)
    m = 200
    g = torch.Generator().manual_seed(11)
    smc = parts(model, y[20:], selection=resample_below(0.5, RESAMPLERS["multinomial"]))
    uniform = torch.full((m,), -math.log(m), dtype=F64)
    whole_run = torch.full((4 * m,), 1.0 / (4 * m), dtype=F64)
    carried, restarted, one_genealogy = [], [], []
    for _ in range(100):
        theta = model.sample_prior(4 * m, g)
        wide = torch.log_softmax(model.log_likelihood(theta, None, y[:20]).sum(-1), 0)
        first_piece = float(((torch.exp(wide) - 1.0 / (4 * m)) ** 2).sum())
        ancestors = RESAMPLERS["multinomial"](torch.exp(wide), g, m)
        _, steps = anneal(smc, start(smc, theta[ancestors], uniform), g, 200)
        carried.append(first_piece + eve_variance(selected(wide, ancestors), steps))
        restarted.append(first_piece + eve_variance(first_generation(uniform), steps))
        one_genealogy.append(eve_variance(Eves(ancestors, whole_run, 0.0), steps))
    whole = statistics.fmean(one_genealogy)
    assert statistics.fmean(carried) / whole == pytest.approx(1.0, abs=0.2)
    assert statistics.fmean(restarted) < 0.6 * whole


def test_the_control_influence_joins_each_eves_term() -> None:
    """Var ≈ Σ_e (M_e − W⁰_e − C_e)²: a first step's influences are summed per Eve through a
    later selection, which copies particles but not their Eves' shares."""
    uniform = torch.full((4,), -math.log(4), dtype=F64)
    first = StepInfo(
        0.0, 0.0, 4.0, True, (), torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)),
        ancestors=torch.tensor([3, 3, 2, 1]),
        control_influence=torch.tensor([0.01, -0.02, 0.03, -0.04], dtype=F64),
    )
    last = StepInfo(
        0.0, 0.0, 4.0, False, (), torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64))
    )
    mass = torch.tensor([0.0, 0.1, 0.2, 0.7], dtype=F64)  # Eve 3 has two copies
    shares = torch.tensor([0.01, -0.02, 0.03, -0.04], dtype=F64)
    expected = float(((mass - 0.25 - shares) ** 2).sum())
    assert eve_variance(first_generation(uniform), [first, last]) == pytest.approx(expected)
