"""The device setting: states, generators and arithmetic on the estimator's device (float64).
The CPU path runs everywhere; the CUDA path where ``torch.cuda.is_available()``."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators import METHODS, OnlineEvidence, build
from modelcompare.estimators.data.serialization import leaves
from modelcompare.models import GaussianMixture, LinearRegression

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]
SMALL = {
    "sgais": {
        "particles": 16,
        "full_batch_rows": 30,
        "batch_size": 10,
        "steps": 3,
        "hmc_moves": 2,
        "leapfrog_steps": 3,
        "mh_correction": "barker",
    },
    "sequential": {
        "particles": 16,
        "full_batch_rows": 30,
        "batch_size": 10,
        "steps": 3,
        "hmc_moves": 2,
        "leapfrog_steps": 3,
    },
    "minibatch_mh": {
        "particles": 16,
        "full_batch_rows": 30,
        "batch_size": 10,
        "steps": 3,
        "hmc_moves": 2,
        "leapfrog_steps": 3,
        "resampling": "residual",
    },
    "hybrid": {
        "particles": 16,
        "live_points": 16,
        "nested_parallel": 4,
        "nested_rows": 20,
        "full_batch_rows": 30,
        "batch_size": 10,
        "steps": 3,
        "hmc_moves": 2,
        "leapfrog_steps": 3,
    },
    "ais": {"particles": 16, "hmc_moves": 2, "leapfrog_steps": 3},
    "nested": {"live_points": 16, "parallel": 4},
    "exact": {},
}


def rows(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(count, 2, generator=g, dtype=torch.float64)
    return x, x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(
        count, generator=g, dtype=torch.float64
    )


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_runs_on_the_device(method: str, device: str) -> None:
    """Past the exact phase (n > 30) so the minibatch moves, control variates and the Barker
    test run too; the data and history stay on the CPU and move over per update."""
    tracker = OnlineEvidence(
        LinearRegression(2), method=method, seed=0, device=device, **SMALL[method]
    )
    x, y = rows(80)
    for start in range(0, 80, 40):
        tracker.update(x[start : start + 40], y[start : start + 40])
    expected = torch.device(device)
    for name, value in leaves(tracker.state).items():
        assert value.device.type == expected.type, name
        assert not value.is_floating_point() or value.dtype == torch.float64, name
    assert math.isfinite(tracker.log_evidence) and tracker.n_observations == 80
    assert tracker.predict(x[:3]).mean.device.type == expected.type
    resumed = OnlineEvidence(
        LinearRegression(2), method=method, seed=0, device=device, **SMALL[method]
    )
    resumed.load(tracker.save())
    assert resumed.state_bytes() == tracker.state_bytes()


@pytest.mark.parametrize("device", DEVICES)
def test_label_symmetric_models_relabel_on_the_device(device: str) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.cat(
        [
            torch.randn(30, 1, generator=g, dtype=torch.float64) - 2.0,
            torch.randn(30, 1, generator=g, dtype=torch.float64) + 2.0,
        ]
    )
    tracker = OnlineEvidence(GaussianMixture(1, 2), seed=0, device=device, **SMALL["sgais"])
    tracker.update(x[torch.randperm(60, generator=g)])
    assert tracker.state.particles.device.type == torch.device(device).type
    assert math.isfinite(tracker.log_evidence)


@pytest.mark.parametrize("device", DEVICES)
def test_generators_are_made_on_the_device(device: str) -> None:
    estimator = build(LinearRegression(1), "sgais", device=device)
    assert estimator.generator(0, "model", 1).device.type == torch.device(device).type
