"""The methods and their settings records: every setting bounded above and below, described,
with a default inside its bounds; ``build`` validates through the same records."""

from __future__ import annotations

import annotated_types
import pytest
import torch

from modelcompare.estimators import (
    METHODS,
    EstimatorConfigError,
    ParticleState,
    Settings,
    build,
    state_to_bytes,
)
from modelcompare.models import LinearRegression, LogisticRegression


def bounds(record: type[Settings], name: str) -> tuple[float | None, float | None]:
    low = high = None
    for constraint in record.model_fields[name].metadata:
        if isinstance(constraint, annotated_types.Ge | annotated_types.Gt):
            low = getattr(constraint, "ge", getattr(constraint, "gt", None))
        if isinstance(constraint, annotated_types.Le | annotated_types.Lt):
            high = getattr(constraint, "le", getattr(constraint, "lt", None))
    return low, high


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_setting_has_a_description_and_numbers_have_two_bounds(method: str) -> None:
    record = METHODS[method].settings
    defaults = record()
    for name, field in record.model_fields.items():
        assert field.description, f"{method}.{name} needs a description"
        if field.annotation in (int, float):
            low, high = bounds(record, name)
            assert low is not None and high is not None, f"{method}.{name} needs both bounds"
            assert low <= getattr(defaults, name) <= high


@pytest.mark.parametrize("method", sorted(METHODS))
def test_upper_bounds_are_enforced(method: str) -> None:
    record = METHODS[method].settings
    for name, field in record.model_fields.items():
        if field.annotation is int:
            _, high = bounds(record, name)
            with pytest.raises(EstimatorConfigError, match=name):
                record.parse({name: int(high) + 1})


def test_unknown_settings_name_the_known_ones() -> None:
    with pytest.raises(EstimatorConfigError, match=r"unknown key 'warp' \(valid keys:.*particles"):
        build(LinearRegression(1), "sgais", warp=9)
    with pytest.raises(EstimatorConfigError, match=r"unknown key 'particles' \(valid keys: device"):
        build(LinearRegression(1), "exact", particles=64)
    with pytest.raises(EstimatorConfigError, match="unknown method 'magic'"):
        build(LinearRegression(1), "magic")


def test_settings_are_typed_strictly() -> None:
    for bad in ({"particles": 64.0}, {"particles": True}, {"control_variates": 1}):
        with pytest.raises(EstimatorConfigError):
            build(LinearRegression(1), "sgais", **bad)
    assert build(LinearRegression(1), "sgais", lr=1).settings.lr == 1.0  # ints pass as floats


def test_build_binds_model_method_and_settings() -> None:
    estimator = build(LogisticRegression(2, classes=3), "minibatch_mh", particles=8, steps=3)
    assert estimator.method == "minibatch_mh" and estimator.particles == 8
    assert estimator.state_type is ParticleState and estimator.settings.steps == 3
    state = estimator.init(estimator.generator(0, "m", "init"))
    assert state.particles.shape == (8, 9) and estimator.n_observations(state) == 0
    assert torch.equal(estimator.load(state_to_bytes(state)).particles, state.particles)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without")
def test_cuda_is_refused_where_there_is_none() -> None:
    with pytest.raises(EstimatorConfigError, match="not available"):
        build(LinearRegression(1), "sgais", device="cuda")
