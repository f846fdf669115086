"""The estimator part of the API: one schema per method generated from the engine's settings
records (defaults, bounds and descriptions on /openapi.json), unknown settings refused with the
known ones named, and the model-plus-estimator binding built once per spec."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError
from service_helpers import (
    assert_error,
    by_name,
    chunks,
    comparison_body,
    exact_log_evidence,
    regression_data,
)
from service_server import StartServer

from modelcompare.estimators import METHODS
from modelcompare.service.core.config import Settings
from modelcompare.service.engine import runner_for
from modelcompare.service.schemas import (
    ESTIMATOR_VARIANTS,
    REFUSED,
    ComparisonIn,
    comparison_spec,
)


def test_openapi_lists_every_method_with_defaults_and_bounds(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    union = components["ComparisonIn"]["properties"]["estimator"]
    assert union["discriminator"]["propertyName"] == "method"
    assert set(union["discriminator"]["mapping"]) == set(METHODS)
    for method, entry in METHODS.items():
        reference = union["discriminator"]["mapping"][method]
        properties = components[reference.rsplit("/", 1)[1]]["properties"]
        assert properties["method"]["const"] == method
        for name, field in entry.settings.model_fields.items():
            shown = properties[name]
            assert shown["description"] == field.description
            assert shown["default"] == field.default
            if field.annotation in (int, float):
                assert {"minimum", "exclusiveMinimum"} & set(shown), (method, name)
                assert {"maximum", "exclusiveMaximum"} & set(shown), (method, name)


def test_unknown_settings_are_refused_naming_the_known_ones(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        body = comparison_body("sgais", warp=9)
        response = client.post("/v1/comparisons", json=body)
        assert_error(response, 422, "invalid_request")
        message = response.json()["error"]["message"]
        assert "unknown key 'warp' (valid keys: " in message and "particles" in message
        too_many = client.post("/v1/comparisons", json=comparison_body("sgais", particles=5000))
        assert_error(too_many, 422, "invalid_request")
        assert "less than or equal to 1024" in too_many.json()["error"]["message"]
        created = client.post(
            "/v1/comparisons", json={**comparison_body(), "estimator": {"particles": 16}}
        )
        assert created.status_code == 201, created.text
        assert created.json()["estimator"] == {"method": "sgais", "particles": 16}


def test_values_worse_for_users_are_refused_with_the_reason(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        for name, refused in REFUSED.items():
            body = comparison_body("sgais", **{name: refused.value})
            response = client.post("/v1/comparisons", json=body)
            assert_error(response, 422, "invalid_request")
            message = response.json()["error"]["message"]
            assert f"estimator.sgais.{name}: " in message, message
            assert "library only" in message and refused.why in message, message
        # the values the API takes, sent as they are, are stored as sent
        taken = {"standard_error": "genealogy", "noise_friction": True}
        created = client.post("/v1/comparisons", json=comparison_body("sgais", **taken))
        assert created.status_code == 201, created.text
        assert created.json()["estimator"] == {"method": "sgais", **taken}


@pytest.mark.parametrize("method", ["sgais", "sequential", "minibatch_mh", "hybrid"])
def test_the_library_keeps_the_refused_values(method: str) -> None:
    record = METHODS[method].settings
    values = {name: r.value for name, r in REFUSED.items() if name in record.model_fields}
    assert record.parse(values).model_dump(include=set(values)) == values
    with pytest.raises(ValidationError, match="library only"):
        ESTIMATOR_VARIANTS[method].model_validate({"method": method, **values})


def test_the_binding_is_built_once_per_spec() -> None:
    request = ComparisonIn.model_validate(
        {**comparison_body("sgais", particles=8), "name": "cached"}
    )
    limits = Settings().limits
    spec = comparison_spec(request, "c1", time.time(), limits)
    first = runner_for(spec, spec.models[0])
    assert runner_for(spec, spec.models[0]) is first
    again = comparison_spec(request, "c2", time.time(), limits)  # another comparison, same spec
    assert runner_for(again, again.models[0]) is first
    reseeded = comparison_spec(request.model_copy(update={"seed": 99}), "c3", time.time(), limits)
    assert runner_for(reseeded, reseeded.models[0]) is not first


@pytest.mark.slow
def test_islands_run_through_the_service_against_the_exact_evidence(
    start_server: StartServer,
) -> None:
    server = start_server("local")
    x, y = regression_data(300, seed=5)
    with server.client() as client:
        body = comparison_body("sgais", particles=16, islands=3)
        created = client.post("/v1/comparisons", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["estimator"] == {"method": "sgais", "particles": 16, "islands": 3}
        cid = created.json()["id"]
        for chunk in chunks(x, y, 100):
            done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
            assert done.status_code == 200, done.text
        models = by_name(client.get(f"/v1/comparisons/{cid}/evidence").json())
        predicted = client.post(f"/v1/comparisons/{cid}/predict", json={"x": x[:2].tolist()})
    assert predicted.status_code == 200, predicted.text
    for spec in body["models"]:
        found = models[spec["name"]]
        columns = [0, 1] if spec["name"] == "too_few" else [0, 1, 2]
        exact = exact_log_evidence(spec["config"], x, y, columns)
        assert found["n_observations"] == 300 and found["log_evidence_stderr"] > 0
        # 4 stderrs and a finite-M bias allowance, as tests/estimators/online/test_sgais.py
        assert abs(found["log_evidence"] - exact) < 4 * found["log_evidence_stderr"] + 0.75
        assert found["ess"] > 16  # the joined cloud of three systems
