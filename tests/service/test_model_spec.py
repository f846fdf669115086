"""Which stored models this process can build (``ModelSpec.unavailable``): the family installed,
from the package recorded, at the same major version and not older than recorded."""

from __future__ import annotations

import pytest
from packaging.version import Version

from modelcompare.models import FamilyUnavailable
from modelcompare.models.registry import families
from modelcompare.service.schemas import ComparisonSpec, ModelSpec

OWN = Version(families().known["linear_regression"].version)
OLDER = f"{OWN.major}.{OWN.minor}.{OWN.micro - 1}" if OWN.micro else f"{OWN.major}.0a0"
NEWER = f"{OWN.major}.{OWN.minor + 1}"
OTHER_MAJOR = f"{OWN.major + 1}.0"


def stored(family: str = "linear_regression", package: str | None = "modelcompare",
           version: str | None = str(OWN)) -> ModelSpec:
    return ModelSpec(name="robust", family=family, package=package, version=version,
                     config={"dim": 1}, columns=[0], prior_weight=1.0)


@pytest.mark.parametrize(("model", "why"), [
    (stored(), None),
    (stored(version=OLDER), None),  # recorded by an older release of the same major: continued
    (stored(package=None, version=None), None),  # recorded before packages were
    (stored("student_t_regression", "modelcompare-example-models", "1.0"),
     "model 'robust': family 'student_t_regression' (modelcompare-example-models) is not "
     "installed here"),
    (stored("student_t_regression", None, None),
     "model 'robust': family 'student_t_regression' (a plugin) is not installed here"),
    (stored(package="modelcompare-example-models"),
     "model 'robust': family 'linear_regression' comes from package modelcompare-example-models "
     "in this comparison but from modelcompare here"),
    (stored(version=OTHER_MAJOR),
     f"model 'robust': family 'linear_regression' needs modelcompare {OTHER_MAJOR} or a later "
     f"{OWN.major + 1}.x; this process has {OWN}"),
    (stored(version=NEWER),
     f"model 'robust': family 'linear_regression' needs modelcompare {NEWER} or a later "
     f"{OWN.major}.x; this process has {OWN}"),
], ids=["same", "same major, newer here", "no package recorded", "missing family",
        "missing family, no package", "other package", "other major", "older than recorded"])
def test_why_a_stored_model_cannot_be_built_here(model: ModelSpec, why: str | None) -> None:
    assert model.unavailable() == why
    if why is None:
        assert model.build().input_dim == 1
    else:
        with pytest.raises(FamilyUnavailable) as refused:
            model.build()
        assert str(refused.value) == why


def test_a_comparison_names_its_first_model_that_cannot_be_built() -> None:
    models = [stored().model_copy(update={"name": name}) for name in ("line", "robust", "t")]
    models[1] = stored(version=OTHER_MAJOR)
    models[2] = stored("student_t_regression").model_copy(update={"name": "t"})
    spec = ComparisonSpec(id="c", name="c", seed=0, created_at=0.0, x_dim=1, has_y=True,
                          estimator={"method": "exact"}, models=models)
    assert spec.unavailable() == models[1].unavailable()
    assert spec.model_copy(update={"models": models[:1]}).unavailable() is None
