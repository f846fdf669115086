"""Plugin families: what the registry makes of entry points, and which versions continue a
comparison (``Family.refuses``)."""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint

import pytest

from modelcompare.models import FamilyUnavailable, LinearRegression, build_model
from modelcompare.models.registry import ENTRY_POINT_GROUP, Family, collect, families
from modelcompare.service.schemas import ModelSpec


def point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_a_plugin_family_joins_the_built_in_ones() -> None:
    found = collect([point("renamed_linear_regression",
                           "plugin_models:RenamedLinearRegression")])
    family = found.known["renamed_linear_regression"]
    assert family.model.__name__ == "RenamedLinearRegression"
    assert family.package == "plugin_models"  # no distribution: its top-level module
    assert {"linear_regression", "gamma_poisson"} <= set(found.known)
    assert found.broken == {}


def test_broken_plugins_are_left_out_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="modelcompare.models"):
        found = collect([
            point("missing", "no_such_module_here:Model"),
            point("not_a_model", "modelcompare.models.target:Target"),
            point("other_name", "plugin_models:RenamedLinearRegression"),
            point("linear_regression", "plugin_models:RenamedLinearRegression"),
        ])
    assert "ModuleNotFoundError" in found.broken["missing"]
    assert found.broken["not_a_model"].endswith("is not a Model subclass")
    assert "not the entry point's name 'other_name'" in found.broken["other_name"]
    assert found.known["linear_regression"].model is LinearRegression  # a built-in stays
    assert found.broken["linear_regression"].startswith("plugin_models: ")
    assert len(caplog.records) == 4
    with pytest.raises(FamilyUnavailable, match=r"'missing' \(its plugin failed to load: "):
        found.get("missing")


def test_a_reused_name_is_refused() -> None:
    found = collect([point("linear_regression", "modelcompare.models:LinearRegression")])
    assert found.broken["linear_regression"] == (
        "modelcompare: family 'linear_regression' is already provided by modelcompare")


def test_an_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(FamilyUnavailable, match="unknown model family 'nope'; known: beta_"):
        build_model("nope")


FAMILY = Family("student_t", LinearRegression, "example-models", "1.4.2")


@pytest.mark.parametrize(("package", "recorded", "why"), [
    ("example-models", "1.4.2", None),
    ("example-models", "1.0", None),  # same major, newer here
    (None, None, None),  # recorded before packages were
    ("example-models", "1.5.0", "needs example-models 1.5.0 or a later 1.x; this process has "
                                "1.4.2"),
    ("example-models", "2.0.0", "needs example-models 2.0.0 or a later 2.x"),
    ("example-models", "0.9", "needs example-models 0.9 or a later 0.x"),
    ("other-models", "1.4.2", "comes from package other-models in this comparison but from "
                              "example-models here"),
])
def test_a_family_continues_the_same_major_version_not_older(
    package: str | None, recorded: str | None, why: str | None
) -> None:
    refusal = FAMILY.refuses(package, recorded)
    assert refusal == why if why is None else why in refusal


def stored(family: str, package: str | None, version: str | None) -> ModelSpec:
    return ModelSpec(name="m", family=family, package=package, version=version,
                     config={"dim": 1}, columns=[0], prior_weight=1.0)


def test_a_stored_model_says_why_this_process_cannot_build_it() -> None:
    own = families().known["linear_regression"].version
    assert stored("linear_regression", "modelcompare", own).unavailable() is None
    assert stored("linear_regression", None, None).build().input_dim == 1
    missing = stored("student_t", "example-models", "1.0")
    assert missing.unavailable() == ("model 'm': family 'student_t' (example-models) is not "
                                     "installed here")
    with pytest.raises(FamilyUnavailable, match="is not installed here"):
        missing.build()
    later = stored("linear_regression", "modelcompare", "999.0")
    assert "needs modelcompare 999.0 or a later 999.x" in later.unavailable()
