"""Past 44 parameters the settings a user left at their defaults scale with D: for the SGHMC
methods the careful and surprise step-count triggers as D / 44 (for minibatch MH the surprise
trigger as √(D / 44)), the SGHMC steps per move as √(D / 44), the SGHMC learning rate as 44 / D,
the exact phase's rows as D / 44 up to 2,000 and its HMC moves per step as √(D / 44), the past's
minibatch as D / 44, the ladder's χ² per step (1/ESS − 1) as 44 / D, SG-AIS's pooled mass
over ⌈2D / 44⌉ clouds, the noise friction's second-order term turned on, and SG-AIS's streams
started from the Gaussian at their first rows' posterior mode;
below that, and wherever the user set them, they are the settings' own."""

from __future__ import annotations

import math

import pytest

from modelcompare.estimators.online.dimension import REFERENCE_PARAMETERS, scaled_to_dimension
from modelcompare.estimators.online.settings import MinibatchMHSettings, SGAISSettings

SCALED = {"careful_steps", "surprise_steps", "steps", "lr", "full_batch_rows", "hmc_moves",
          "ess_target", "mass_clouds", "batch_size", "noise_estimate_variance", "start"}


@pytest.mark.parametrize("dim", [1, 21, REFERENCE_PARAMETERS])
def test_models_up_to_the_reference_size_keep_the_settings(dim: int) -> None:
    settings = SGAISSettings.parse({})
    assert scaled_to_dimension(settings, dim) is settings


@pytest.mark.parametrize(("dim", "triggers", "steps", "exact_rows", "ess_target", "clouds"),
                         [(45, 8, 20, 511, 0.8036, 3), (81, 15, 27, 920, 0.8804, 4),
                          (161, 29, 38, 1830, 0.9360, 8), (200, 36, 43, 2000, 0.9479, 10)])
def test_larger_models_scale_the_defaults(
    dim: int, triggers: int, steps: int, exact_rows: int, ess_target: float, clouds: int
) -> None:
    scaled = scaled_to_dimension(SGAISSettings.parse({}), dim)
    root = math.sqrt(dim / REFERENCE_PARAMETERS)
    assert (triggers, steps) == (round(8 * dim / REFERENCE_PARAMETERS), round(20 * root))
    assert scaled.mass_clouds == scaled.careful.mass_clouds == clouds
    assert clouds == math.ceil(2 * dim / REFERENCE_PARAMETERS)
    # D / 44 times 500 rows, but never past the setting's bound (2,000 at D = 200: 2,273)
    assert exact_rows == min(round(500 * dim / REFERENCE_PARAMETERS), 2000)
    assert scaled.full_batch_rows == exact_rows
    assert scaled.hmc_moves == round(8 * root)
    assert scaled.batch_size == scaled.careful.batch_size == round(100 * dim / REFERENCE_PARAMETERS)
    assert (scaled.careful_steps, scaled.surprise_steps, scaled.steps) == (
        triggers, triggers, steps)
    assert scaled.lr == pytest.approx(0.025 * REFERENCE_PARAMETERS / dim, rel=1e-15)
    assert scaled.careful.lr == scaled.lr  # the careful steps' moves take the scaled rate
    # χ² = 1/ESS − 1 = 0.25 at the default 0.8, × 44 / D
    assert 1 / scaled.ess_target - 1 == pytest.approx(0.25 * REFERENCE_PARAMETERS / dim)
    assert scaled.ess_target == pytest.approx(ess_target, abs=5e-5)
    assert scaled.careful.ess_target == 0.98  # the careful steps keep their own target
    assert scaled.noise_estimate_variance and scaled.sghmc.estimate_variance
    assert not SGAISSettings.parse({}).sghmc.estimate_variance
    assert (scaled.start, SGAISSettings.parse({}).start) == ("laplace", "prior")
    assert scaled.model_dump(exclude=SCALED) == SGAISSettings.parse({}).model_dump(
        exclude=SCALED)


def test_a_setting_the_user_gave_is_kept() -> None:
    scaled = scaled_to_dimension(
        SGAISSettings.parse({"careful_steps": 8, "lr": 0.05, "full_batch_rows": 300,
                             "ess_target": 0.7, "mass_clouds": 1, "batch_size": 50,
                             "noise_estimate_variance": False, "start": "prior"}), 161)
    assert (scaled.careful_steps, scaled.surprise_steps, scaled.steps, scaled.lr,
            scaled.full_batch_rows, scaled.hmc_moves, scaled.ess_target, scaled.mass_clouds,
            scaled.batch_size, scaled.noise_estimate_variance, scaled.start) == (
                8, 29, 38, 0.05, 300, 15, 0.7, 1, 50, False, "prior")
    # the old name sets both triggers (extension_settings.renamed): both kept
    both = scaled_to_dimension(SGAISSettings.parse({"surprise_steps": 9}), 161)
    assert (both.careful_steps, both.surprise_steps) == (9, 9)


def test_minibatch_mh_scales_its_surprise_trigger_only() -> None:
    # its exact phase too stays at 500 rows: the longer one is for the SGHMC moves that follow
    scaled = scaled_to_dimension(MinibatchMHSettings.parse({}), 161)
    assert scaled.surprise_steps == 15
    assert scaled.model_dump(exclude={"surprise_steps"}) == MinibatchMHSettings.parse(
        {}).model_dump(exclude={"surprise_steps"})
