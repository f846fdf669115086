"""A model with more parameters than the estimator is checked to serve is accepted, with a
warning in the comparison's description (POST and GET); a small one, or any model under the
closed-form method, has none."""

from __future__ import annotations

from typing import Any

import pytest
from service_server import Server

from modelcompare.estimators.validated import VALIDATED_PARAMETERS


def body(method: str) -> dict[str, Any]:
    wide = VALIDATED_PARAMETERS  # inputs: with the bias, one parameter past the checked range
    return {
        "name": "sizes",
        "models": [
            {"name": "small", "family": "linear_regression", "config": {"dim": 3},
             "columns": [0, 1, 2]},
            {"name": "wide", "family": "linear_regression", "config": {"dim": wide},
             "columns": list(range(wide))},
        ],
        "estimator": {"method": method},
        "x_dim": wide,
    }


@pytest.mark.parametrize("method", ["sgais", "exact"])
def test_only_a_model_past_the_checked_size_is_warned_about(server: Server, method: str) -> None:
    with server.client() as client:
        created = client.post("/v1/comparisons", json=body(method))
        assert created.status_code == 201, created.text
        described = client.get(f"/v1/comparisons/{created.json()['id']}").json()
    for reply in (created.json(), described):
        warnings = {m["name"]: m["warnings"] for m in reply["models"]}
        assert warnings["small"] == []
        if method == "exact":
            assert warnings["wide"] == []
        else:
            (warning,) = warnings["wide"]
            assert warning.startswith(f"{VALIDATED_PARAMETERS + 1} parameters, more than the "
                                      f"{VALIDATED_PARAMETERS} up to which the sgais evidence")
