"""K independent SG-AIS systems as one estimator (``online.islands``): the joined state splits
back into its systems, each runs as one system would (on a fake system: its own generator, its
own slice of the state), and Ẑ is their average."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save

from modelcompare.estimators import EstimatorConfigError, OnlineEvidence, build, exact_log_evidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.data.serialization import (
    leaves,
    state_from_bytes,
    state_to_tensors,
)
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import sgais
from modelcompare.estimators.online.islands import averaged, islands, joined, split
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.models import LinearRegression

ROWS, POST = 300, 100


def linear_rows(seed: int, rows: int = ROWS) -> Rows:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 3, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    return Rows(x, y + 0.5 * torch.randn(rows, generator=generator, dtype=torch.float64))


def model() -> LinearRegression:
    return LinearRegression(dim=3, noise_std=0.5, prior_std=1.0)


def test_averaged_is_the_log_mean_of_z_with_its_delta_method_variance() -> None:
    log_z = torch.tensor([-10.0, -10.0 + math.log(3.0)], dtype=torch.float64)
    variances = torch.tensor([0.4, 0.2], dtype=torch.float64)
    log_mean, variance = averaged(log_z, variances)
    assert log_mean == pytest.approx(-10.0 + math.log(2.0))  # (1 + 3) / 2 in units of e^-10
    assert variance == pytest.approx(0.25**2 * 0.4 + 0.75**2 * 0.2)  # shares 1/4 and 3/4
    # equal systems: the mean of K equal Ẑ, its variance σ²/K
    same, spread = averaged(torch.full((4,), -3.0, dtype=torch.float64),
                            torch.full((4,), 0.8, dtype=torch.float64))
    assert same == pytest.approx(-3.0) and spread == pytest.approx(0.2)


def test_a_joined_state_splits_back_into_its_systems() -> None:
    estimator = build(model(), "sgais", particles=8)
    states = []
    for seed in range(3):
        state = estimator.init(torch.Generator().manual_seed(seed))
        weights = torch.log_softmax(torch.randn(8, generator=torch.Generator().manual_seed(seed),
                                                dtype=torch.float64), 0)
        states.append(state._replace(log_weights=weights,
                                     log_evidence=torch.tensor(-float(seed), dtype=torch.float64)))
    together = joined(states)
    assert together.particles.shape == (24, 4) and together.log_evidence.shape == (3,)
    # the joined weights are each system's, scaled by its share of Σ Ẑ
    shares = torch.softmax(torch.tensor([0.0, -1.0, -2.0], dtype=torch.float64), 0)
    assert torch.logsumexp(together.log_weights[8:16], 0).exp() == pytest.approx(float(shares[1]))
    for original, back in zip(states, split(together, 3), strict=True):
        expected, found = leaves(original), leaves(back)
        assert found.keys() == expected.keys()
        for name, value in expected.items():
            assert torch.allclose(found[name], value), name


def fake_system(calls: list[tuple[int, float]]) -> Estimator[ParticleState, float]:
    """A stand-in system of 4 particles: an update moves them by 1, adds its generator's first
    draw u to log Ẑ and the chunk's rows to n, reports u, and records (particles, u)."""
    base = build(model(), "sgais", particles=4)

    def update(state: ParticleState, chunk: Rows, history: object, generator: torch.Generator,
               deadline: object = None) -> tuple[ParticleState, float]:
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        calls.append((state.particles.shape[0], u))
        return state._replace(particles=state.particles + 1.0,
                              log_evidence=state.log_evidence + u,
                              n_observations=state.n_observations + chunk.count), u

    return Estimator(
        method="fake", model=base.model, settings=base.settings, state_type=ParticleState,
        particles=4, init=lambda g: init(base.model, base.settings, g), update=update,
        log_evidence=base.log_evidence, log_evidence_variance=base.log_evidence_variance,
        n_observations=base.n_observations, ess=base.ess, predict=base.predict,
    )


def test_islands_run_k_fake_systems_each_on_its_slice_with_its_own_generator() -> None:
    calls: list[tuple[int, float]] = []
    combined: list[list[float]] = []

    def combine(infos: list[float], before: ParticleState, after: ParticleState) -> float:
        combined.append(infos)
        return sum(infos)

    three = islands(fake_system(calls), 3, combine)
    assert three.particles == 12
    state = three.init(torch.Generator().manual_seed(0))
    assert state.particles.shape == (12, 4) and state.log_evidence.shape == (3,)
    after, info = three.update(state, linear_rows(0, 5), RowsHistory(linear_rows(0, 0)),
                               torch.Generator().manual_seed(1))
    drawn = int(torch.randint(1 << 62, (1,), generator=torch.Generator().manual_seed(1)))
    expected = [float(torch.rand((), generator=derive_generator(drawn, "island", k),
                                 dtype=torch.float64)) for k in range(3)]
    assert calls == [(4, u) for u in expected]
    assert combined == [expected] and info == pytest.approx(sum(expected))
    assert torch.equal(after.particles, state.particles + 1.0)
    assert torch.equal(after.log_evidence, state.log_evidence + torch.tensor(expected,
                                                                             dtype=torch.float64))
    assert three.n_observations(after) == 5
    assert islands(fake_system(calls), 1, combine).method == "fake"


@pytest.mark.slow
def test_each_island_runs_as_one_system_with_its_own_generator() -> None:
    rows = linear_rows(0)
    single = sgais.bind(model(), SGAISSettings(particles=16))
    three = sgais.bind(model(), SGAISSettings(particles=16, islands=3))
    assert three.particles == 48

    def island_generators(seed: int) -> list[torch.Generator]:
        drawn = int(torch.randint(1 << 62, (1,), generator=torch.Generator().manual_seed(seed)))
        return [derive_generator(drawn, "island", k) for k in range(3)]

    state = three.init(torch.Generator().manual_seed(100))
    alone = [single.init(g) for g in island_generators(100)]
    for step, start in enumerate(range(0, ROWS, POST)):
        past, chunk = RowsHistory(rows.slice(0, start)), rows.slice(start, start + POST)
        state, info = three.update(state, chunk, past, torch.Generator().manual_seed(step))
        updated = [single.update(s, chunk, past, g)
                   for s, g in zip(alone, island_generators(step), strict=True)]
        alone = [s for s, _ in updated]
        assert info.annealing_steps == sum(i.annealing_steps for _, i in updated)
        assert info.rows == POST and info.sub_chunks == updated[0][1].sub_chunks
    for island, system in zip(split(state, 3), alone, strict=True):
        assert torch.allclose(island.particles, system.particles)
        assert float(island.log_evidence) == pytest.approx(float(system.log_evidence))
    log_mean, variance = averaged(torch.stack([s.log_evidence for s in alone]),
                                  torch.stack([s.log_evidence_variance for s in alone]))
    assert three.log_evidence(state) == pytest.approx(log_mean + variance / 2)
    assert three.log_evidence_variance(state) == pytest.approx(variance)
    assert three.n_observations(state) == ROWS
    assert 1.0 <= three.ess(state) <= 48.0


@pytest.mark.slow
def test_four_islands_against_the_exact_evidence_with_half_the_stderr() -> None:
    rows = linear_rows(1)
    exact = exact_log_evidence(model(), rows.x, rows.y)
    one = OnlineEvidence(model(), seed=3)
    four = OnlineEvidence(model(), seed=3, islands=4)
    for tracker in (one, four):
        for start in range(0, ROWS, POST):
            tracker.update(rows.x[start : start + POST], rows.y[start : start + POST])
    assert four.state.particles.shape == (256, 4)
    # K equal systems: σ̄ = σ / √K; the systems' stderrs vary, so within a factor of 1.5
    assert 0.5 / 1.5 < four.log_evidence_stderr / one.log_evidence_stderr < 0.5 * 1.5
    assert abs(four.log_evidence - exact) < 4 * four.log_evidence_stderr
    # the joined cloud predicts as the weighted average of the systems' clouds
    prediction = four.predict(rows.x[:2])
    parts = split(four.state, 4)
    shares = torch.softmax(four.state.log_evidence, 0)
    means = torch.stack([
        model().predict(p.particles, p.log_weights, rows.x[:2]).mean for p in parts
    ])
    assert torch.allclose(prediction.mean, shares @ means)


def test_a_saved_islands_state_loads_bit_exactly() -> None:
    rows = linear_rows(2)
    tracker = OnlineEvidence(model(), seed=0, islands=2, particles=8)
    tracker.update(rows.x[:POST], rows.y[:POST])
    again = OnlineEvidence(model(), seed=0, islands=2, particles=8)
    again.load(tracker.save())
    assert again.state_bytes() == tracker.state_bytes()
    assert again.log_evidence == tracker.log_evidence


def test_a_state_stored_before_a_field_existed_splits_and_updates() -> None:
    """Fields added since a joined state was stored (the Eves, the exact phase's steps) load
    with their defaults, which have no axis of systems: each system takes the default, and the
    update after it stacks what each system wrote."""
    rows = linear_rows(3)
    tracker = OnlineEvidence(model(), seed=0, islands=2, particles=8, full_batch_rows=50)
    tracker.update(rows.x[:POST], rows.y[:POST])
    tensors = state_to_tensors(tracker.state)
    added = ("reestimate_exact_steps", "eves", "eve_weights", "lost_eves")
    for name in added:
        del tensors[name]
    old = state_from_bytes(ParticleState, save(tensors, metadata={"type": "ParticleState"}))
    assert old.reestimate.exact_steps.shape == () and old.genealogy.eves.shape == (0,)
    systems = split(old, 2)
    for k, system in enumerate(systems):
        assert system.reestimate.exact_steps.shape == () and int(system.reestimate.exact_steps) == 0
        assert system.genealogy.eves.numel() == 0
        assert torch.equal(system.anchor.point, old.anchor.point[k])
    tracker.state = old
    tracker.update(rows.x[POST:], rows.y[POST:])
    stacked = leaves(tracker.state)
    assert all(stacked[name].shape[0] == 2 for name in added)
    assert math.isfinite(tracker.log_evidence)


def test_islands_are_bounded_and_one_system_is_the_plain_estimator() -> None:
    with pytest.raises(EstimatorConfigError, match="islands"):
        build(model(), "sgais", islands=17)
    with pytest.raises(EstimatorConfigError, match="islands"):
        build(model(), "hybrid", islands=2)
    assert build(model(), "sgais", islands=1).particles == 64
    assert build(model(), "sgais", islands=16).particles == 1024
