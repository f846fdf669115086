"""The published support of y (``Target``) and the refusals it gives every model."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.models import build_model
from modelcompare.models.target import COUNT, REAL, Target, labels

VALUES = torch.tensor([0.0, 1.0, 2.0, 2.5, -1.0, math.inf, math.nan], dtype=torch.float64)


@pytest.mark.parametrize(("target", "refused"), [
    (REAL, [False, False, False, False, False, True, True]),
    (COUNT, [False, False, False, True, True, True, True]),
    (labels(2), [False, False, True, True, True, True, True]),
])
def test_refused_values(target: Target, refused: list[bool]) -> None:
    assert target.refused(VALUES).tolist() == refused


def test_public_round_trip() -> None:
    assert labels(3).public() == {"kind": "label", "classes": 3}
    assert Target.of(labels(3).public()) == labels(3)
    assert Target.of(COUNT.public()) == COUNT


@pytest.mark.parametrize(("family", "config", "target"), [
    ("linear_regression", {"dim": 1}, REAL),
    ("logistic_regression", {"dim": 1, "classes": 4}, labels(4)),
    ("beta_bernoulli", {}, labels(2)),
    ("poisson_regression", {"dim": 1}, COUNT),
    ("gamma_poisson", {}, COUNT),
    ("gaussian_mixture", {"dim": 1, "components": 2}, None),
])
def test_each_family_publishes_its_target(family: str, config: dict, target: Target | None) -> None:
    assert build_model(family, **config).target() == target


def test_validate_data_refuses_what_the_target_refuses() -> None:
    model = build_model("poisson_regression", dim=1)
    x = torch.zeros(3, 1, dtype=torch.float64)
    model.validate_data(x, torch.tensor([0.0, 3.0, 7.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="poisson_regression needs y to be non-negative integers"):
        model.validate_data(x, torch.tensor([0.0, 3.5, 7.0], dtype=torch.float64))
