"""Settings dicts written with the names of before the renames (stored comparison specs, old
requests) build the very settings the new names build."""

from __future__ import annotations

from typing import Any

import pytest

from modelcompare.estimators import build
from modelcompare.models import LinearRegression

OLD_CAREFUL = {"surprise_steps": 5, "surprise_ess_target": 0.95, "surprise_move_steps": 30,
               "surprise_particles": 2}
NEW_CAREFUL = {"surprise_steps": 5, "careful_steps": 5, "careful_ess_target": 0.95,
               "careful_move_steps": 30, "careful_particles": 2}
OLD_REESTIMATE = {"restart_growth": 3.0, "restart_min_rows": 10, "restart_max_rows": 99}
NEW_REESTIMATE = {"reestimate_growth": 3.0, "reestimate_min_rows": 10, "reestimate_max_rows": 99}


@pytest.mark.parametrize(("method", "old", "new"), [
    ("sgais", {**OLD_CAREFUL, **OLD_REESTIMATE}, {**NEW_CAREFUL, **NEW_REESTIMATE}),
    ("hybrid", {**OLD_CAREFUL, **OLD_REESTIMATE}, {**NEW_CAREFUL, **NEW_REESTIMATE}),
    ("minibatch_mh", OLD_REESTIMATE, NEW_REESTIMATE),
])
def test_an_old_named_settings_dict_builds_the_same_settings(
    method: str, old: dict[str, Any], new: dict[str, Any]
) -> None:
    from_old = build(LinearRegression(2), method, particles=16, **old).settings
    assert from_old == build(LinearRegression(2), method, particles=16, **new).settings
    assert from_old.model_dump().keys().isdisjoint(old.keys() - new.keys())
