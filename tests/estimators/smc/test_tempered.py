"""The tempered-SMC step from parts: what each part receives, the identities the loop must keep
(log Z a sum of per-step increments of normalised weights), and its safeguards."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from modelcompare.estimators.deadline import Checkpoint
from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.smc.resampling import RESAMPLERS, drop_weights, resample_below
from modelcompare.estimators.smc.temperature import adaptive, all_at_once
from modelcompare.estimators.smc.tempered import (
    Move,
    Moved,
    TemperedSMC,
    anneal,
    anneal_planned,
    checked_log_likelihood,
    start,
    step,
)
from modelcompare.models import BetaBernoulli

F64 = torch.float64


def coin(rows: int, seed: int) -> tuple[BetaBernoulli, torch.Tensor, torch.Tensor]:
    """A Beta–Bernoulli model, M prior particles and data."""
    g = torch.Generator().manual_seed(seed)
    model = BetaBernoulli(2.0, 2.0)
    y = (torch.rand(rows, generator=g, dtype=F64) < 0.8).to(F64)
    return model, model.sample_prior(2000, g), y


def to(position: Callable[[torch.Tensor], torch.Tensor]) -> Move:
    """A move that sends the particles θ to ``position(θ)`` whatever λ and the mass factor."""

    def move(
        theta: torch.Tensor,
        temperature: float,
        scale: torch.Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        return Moved(position(theta), ())

    return move


still = to(lambda theta: theta)


def parts(model: BetaBernoulli, y: torch.Tensor, **kwargs: Any) -> TemperedSMC:
    def log_likelihood(theta: torch.Tensor) -> torch.Tensor:
        return checked_log_likelihood(model.log_likelihood(theta, None, y).sum(-1))

    defaults = dict(
        log_likelihood=log_likelihood,
        temperature_rule=adaptive(0.5),
        selection=resample_below(0.0, RESAMPLERS["systematic"]),  # never resample
        move=still,
    )
    return TemperedSMC(**{**defaults, **kwargs})


def uniform(m: int) -> torch.Tensor:
    return torch.full((m,), -math.log(m), dtype=F64)


def test_without_moves_or_resampling_the_ladder_telescopes_to_importance_sampling() -> None:
    """Σ_t log Σ_i W_i,t w_i,t = log (1/M) Σ_i p(y | θ_i) exactly when nothing moves: the
    increments of normalised weights multiply to the plain importance-sampling estimate."""
    model, theta, y = coin(40, 0)
    smc = parts(model, y)
    final, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    log_lik = model.log_likelihood(theta, None, y).sum(-1)
    direct = float(torch.logsumexp(log_lik, 0) - math.log(2000))
    assert len(steps) > 1 and final.temperature == 1.0
    assert sum(s.log_evidence_increment for s in steps) == pytest.approx(direct, abs=1e-10)
    assert torch.allclose(final.log_weights, torch.log_softmax(log_lik, 0), atol=1e-10)
    # and conditional ESS hits its target at every step but the last
    assert all(not s.resampled for s in steps)


def test_particles_the_piece_rules_out_are_weighted_out_and_log_z_still_telescopes() -> None:
    """A quarter of the particles 10³⁰ nats below the rest on the piece: no Δ keeps the
    conditional ESS, the ladder goes on with the survivors, and the increments still multiply
    to the importance-sampling estimate (which those particles add nothing to)."""
    model, theta, y = coin(40, 0)
    ruled_out = theta[:, 0] > theta[:, 0].quantile(0.75)

    def log_likelihood(particles: torch.Tensor) -> torch.Tensor:
        far = particles[:, 0] > theta[:, 0].quantile(0.75)
        return model.log_likelihood(particles, None, y).sum(-1) - 1e30 * far

    smc = parts(model, y, log_likelihood=log_likelihood, temperature_rule=adaptive(0.9))
    final, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    log_lik = model.log_likelihood(theta, None, y).sum(-1)[~ruled_out]
    direct = float(torch.logsumexp(log_lik, 0) - math.log(2000))
    assert final.temperature == 1.0 and steps[0].ess < 0.76 * 2000
    assert sum(s.log_evidence_increment for s in steps) == pytest.approx(direct, abs=1e-10)
    assert float(torch.exp(final.log_weights[ruled_out]).sum()) == 0.0


def test_adaptive_steps_keep_the_target_ess_and_resampling_resets_weights() -> None:
    model, theta, y = coin(40, 1)
    smc = parts(model, y, selection=resample_below(0.5, RESAMPLERS["systematic"]))
    final, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    assert any(s.resampled for s in steps)
    assert float(final.log_weights.exp().sum()) == pytest.approx(1.0)
    exact = float(model.batch_log_evidence(None, y))
    total = sum(s.log_evidence_increment for s in steps)
    stderr = math.sqrt(sum(s.log_evidence_increment_variance for s in steps))
    assert abs(total - exact) < 4 * stderr + 0.05


def test_all_at_once_with_dropped_weights_is_one_predictive_average() -> None:
    model, theta, y = coin(10, 2)
    smc = parts(model, y, temperature_rule=all_at_once, selection=drop_weights)
    final, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 1)
    log_lik = model.log_likelihood(theta, None, y).sum(-1)
    assert len(steps) == 1 and final.temperature == 1.0
    assert steps[0].log_evidence_increment == pytest.approx(
        float(torch.logsumexp(log_lik, 0) - math.log(2000)), abs=1e-12
    )
    assert torch.equal(final.log_weights, uniform(2000))


def test_every_part_is_called_with_what_it_needs() -> None:
    model, theta, y = coin(40, 3)
    seen: list[tuple[float, tuple[int, ...]]] = []
    relabelled = []

    def recording_move(
        theta: torch.Tensor,
        temperature: float,
        scale: torch.Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        checkpoint()  # no deadline: a no-op
        seen.append((temperature, tuple(scale.shape)))
        return Moved(theta + 0.0, (0.5,))

    def relabel(theta: torch.Tensor, log_weights: torch.Tensor) -> torch.Tensor:
        relabelled.append(float(log_weights.exp().sum()))
        return theta

    smc = parts(model, y, move=recording_move, relabel=relabel)
    _, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    temperatures = [t for t, _ in seen]
    assert temperatures == sorted(temperatures) and temperatures[-1] == 1.0
    assert all(shape == (1, 1) for _, shape in seen)  # the mass factor L is D × D
    assert len(relabelled) == len(steps) and all(abs(s - 1.0) < 1e-12 for s in relabelled)
    assert all(s.acceptance == (0.5,) for s in steps)


def test_a_stalled_ladder_and_too_many_steps_raise() -> None:
    model, theta, y = coin(40, 4)
    smc = parts(model, y, temperature_rule=lambda log_w, log_lik, remaining: 0.0)
    with pytest.raises(EstimatorError, match="stalled"):
        anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    smc = parts(model, y)
    with pytest.raises(EstimatorError, match="reached only"):
        anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 1)


def test_nan_and_all_infinite_log_likelihoods_raise() -> None:
    with pytest.raises(EstimatorError, match="NaN"):
        checked_log_likelihood(torch.tensor([0.0, math.nan], dtype=F64))
    with pytest.raises(EstimatorError, match="zero likelihood"):
        checked_log_likelihood(torch.full((3,), -math.inf, dtype=F64))


def test_a_plan_advanced_from_each_state_gives_the_parts_of_every_later_step() -> None:
    model, theta, y = coin(40, 3)
    calls: list[str] = []

    def move_of(name: str) -> Move:
        def position(theta: torch.Tensor) -> torch.Tensor:
            calls.append(name)
            return theta

        return to(position)

    first, later = parts(model, y, move=move_of("first")), parts(model, y, move=move_of("later"))
    refreshed: list[float] = []

    def advance(plan: int, state: Any) -> int:
        refreshed.append(state.temperature)
        return plan + 1

    _, steps, plan = anneal_planned(
        0, lambda plan: first if plan == 0 else later, advance,
        start(first, theta, uniform(2000)), torch.Generator(), 100,
    )
    assert len(steps) > 2 and calls == ["first"] + ["later"] * (len(steps) - 1)
    assert len(refreshed) == len(steps) - 1 and 0.0 < refreshed[0] == sorted(refreshed)[0] < 1.0
    assert plan == len(steps) - 1  # the last plan is the one the last step ran with


def test_a_move_that_leaves_the_domain_is_undone_for_those_particles() -> None:
    """A move leaves every other particle where the log-likelihood is NaN (here NaN itself, as
    a diverged trajectory would): those stay where they were, the rest move, and the
    log-likelihoods are those of the positions kept."""
    model, theta, y = coin(40, 3)

    def half_astray(theta: torch.Tensor) -> torch.Tensor:
        shifted = (theta * 0.9).clone()
        shifted[::2] = math.nan
        return shifted

    smc = parts(model, y, move=to(half_astray), log_likelihood=lambda t: model.log_likelihood(
        t, None, y).sum(-1))
    state, _ = step(smc, start(smc, theta, uniform(2000)), torch.Generator(), lambda: None)
    assert torch.equal(state.particles[::2], theta[::2])
    torch.testing.assert_close(state.particles[1::2], theta[1::2] * 0.9)
    torch.testing.assert_close(state.log_likelihood,
                               model.log_likelihood(state.particles, None, y).sum(-1))


def test_a_move_that_sends_particles_far_into_the_tails_is_undone_for_those_particles() -> None:
    """A move sends every fourth particle 10³ spreads out, where λ·log p(piece | θ) falls by
    millions of nats: those stay where they were and count as diverged; a move that loses less
    than ``DIVERGED_NATS`` beyond the cloud's spread is kept, however unlikely."""
    model, theta, y = coin(40, 3)

    def piece(t: torch.Tensor) -> torch.Tensor:
        return -50.0 * (t[:, 0] - 0.7) ** 2  # spread over (0, 1): under 25 nats

    def some_astray(theta: torch.Tensor) -> torch.Tensor:
        moved = theta * 0.9
        moved[::4] += 1e3
        moved[1::4] = theta[1::4] + 1.0  # up to 50 nats lost: within 1000 / λ of the spread
        return moved

    smc = parts(model, y, move=to(some_astray), log_likelihood=piece)
    state, info = step(smc, start(smc, theta, uniform(2000)), torch.Generator(), lambda: None)
    assert 0.0 < state.temperature < 1.0
    assert torch.equal(state.particles[::4], theta[::4])
    torch.testing.assert_close(state.particles[1::4], theta[1::4] + 1.0)
    torch.testing.assert_close(state.particles[2::4], theta[2::4] * 0.9)
    torch.testing.assert_close(state.log_likelihood, piece(state.particles))
    assert info.diverged == 0.25


@pytest.mark.slow
def test_the_control_variates_correct_only_the_first_step() -> None:
    """The controls are asked for once per ladder, at λ = 0, and only that step carries their
    influence; its increment is the plain one corrected (Beta posterior: the score of π₀ is
    that of the Beta(2, 2) prior in the model's coordinates)."""
    model, theta, y = coin(40, 4)
    calls: list[int] = []

    def score(particles: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        calls.append(particles.shape[0])
        return torch.func.vmap(torch.func.grad(lambda t: model.log_prior(t[None])[0]))(particles)

    plain = parts(model, y)
    smc = parts(model, y, control=score)
    _, plain_steps = anneal(plain, start(plain, theta, uniform(2000)), torch.Generator(), 100)
    _, steps = anneal(smc, start(smc, theta, uniform(2000)), torch.Generator(), 100)
    assert calls == [2000, 2000] and len(steps) == len(plain_steps) >= 2
    assert steps[0].control_influence is not None
    assert all(s.control_influence is None for s in steps[1:])
    assert steps[0].log_evidence_increment != plain_steps[0].log_evidence_increment
    assert [s.log_evidence_increment for s in steps[1:]] == [
        s.log_evidence_increment for s in plain_steps[1:]
    ]
