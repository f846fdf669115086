"""Both families pass every check of ``modelcompare check-model`` (modelcompare's model
contract), with inputs and without."""

from __future__ import annotations

from typing import Any

import pytest

from modelcompare.models.conformance import Outcome, check_model

from modelcompare_example_models import NegativeBinomialRegression, StudentTRegression


@pytest.mark.slow
@pytest.mark.parametrize(("model_class", "config"), [
    (StudentTRegression, {"dim": 2}),
    (StudentTRegression, {"dim": 0, "dof": 30.0}),
    (NegativeBinomialRegression, {"dim": 2}),
    (NegativeBinomialRegression, {"dim": 0, "dispersion_scale": 0.1}),
])
def test_every_check_passes(model_class: type, config: dict[str, Any]) -> None:
    findings = check_model(model_class, config)
    assert [f.check for f in findings if f.outcome is not Outcome.PASS] == [], findings
    assert len(findings) == 14
