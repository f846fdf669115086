"""Installed, the package declares both families under modelcompare's entry-point group, and
modelcompare's registry finds them with this package's name and version."""

from __future__ import annotations

from importlib.metadata import entry_points

from modelcompare.models import build_model, families
from modelcompare.models.registry import ENTRY_POINT_GROUP

from modelcompare_example_models import NegativeBinomialRegression, StudentTRegression

PACKAGE = "modelcompare-example-models"


def test_the_entry_points_name_the_families() -> None:
    found = {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)
             if point.dist is not None and point.dist.name == PACKAGE}
    assert found == {
        "student_t_regression": "modelcompare_example_models.student_t:StudentTRegression",
        "negative_binomial_regression":
            "modelcompare_example_models.negative_binomial:NegativeBinomialRegression",
    }


def test_modelcompare_builds_them_by_name() -> None:
    for model_class in (StudentTRegression, NegativeBinomialRegression):
        family = families().get(model_class.family)
        assert (family.model, family.package, family.version) == (model_class, PACKAGE, "1.0.0")
    model = build_model("negative_binomial_regression", dim=3)
    assert isinstance(model, NegativeBinomialRegression)
    assert model.config() == {"dim": 3, "prior_std": 1.0, "dispersion_scale": 1.0}
