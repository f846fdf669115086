"""The OpenAPI document is exact: families and their settings come from the models' own records,
every route declares its errors with the shared body, and what the document says about media
types, 405 and 415 is what a real server does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_helpers import assert_error, comparison_body
from service_server import RunningServer, Server

from modelcompare.models import FAMILIES
from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings
from modelcompare.service.schemas import REFUSED


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings(api_keys={"k": {"read": ["*"], "write": ["*"]}})).openapi()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = RunningServer(
        Settings(redis_url=None, poll_interval=0.1, data_dir=tmp_path_factory.mktemp("embedded"))
    )
    yield running.handle
    running.stop()


def test_every_family_is_a_variant_with_its_own_record(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    union = schemas["ComparisonIn"]["properties"]["models"]["items"]
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "family"
    assert set(mapping) == set(FAMILIES)
    for family, cls in FAMILIES.items():
        variant = schemas[mapping[family].rsplit("/", 1)[1]]
        assert variant["properties"]["family"]["const"] == family
        record = cls.Config.__name__
        assert variant["properties"]["config"] == {"$ref": f"#/components/schemas/{record}"}
        assert schemas[record] == cls.Config.model_json_schema()  # the record, not a copy
        required = any(f.is_required() for f in cls.Config.model_fields.values())
        assert ("config" in variant["required"]) == required


def test_sgais_has_at_most_eight_everyday_settings_listed_first(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    union = schemas["ComparisonIn"]["properties"]["estimator"]
    for method, reference in union["discriminator"]["mapping"].items():
        properties = schemas[reference.rsplit("/", 1)[1]]["properties"]
        settings = [name for name in properties if name != "method"]
        tiers = [properties[name].get("x-advanced", False) for name in settings]
        assert tiers == sorted(tiers), (method, settings)  # everyday first
        if method == "sgais":
            assert 1 <= tiers.count(False) <= 8, settings
    sgais = schemas[union["discriminator"]["mapping"]["sgais"].rsplit("/", 1)[1]]["properties"]
    assert {name for name in sgais if not sgais[name].get("x-advanced")} == {
        "method", "particles", "islands", "device", "full_batch_rows", "batch_size",
        "reestimate_growth"}


def test_refused_values_are_not_in_the_document(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    sgais = schemas["SgaisEstimator"]["properties"]
    for name, refused in REFUSED.items():
        assert refused.value != sgais[name]["const"] == sgais[name]["default"], name
        assert sgais[name]["x-advanced"] is True


def test_every_route_declares_its_errors_with_the_shared_body(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # FastAPI's 422 body: never sent here
    for path, item in document["paths"].items():
        for method, operation in item.items():
            errors = {
                code: response
                for code, response in operation["responses"].items()
                if code.startswith(("4", "5"))
            }
            for code, response in errors.items():
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, code)
            if "{cid}" in path:
                assert "404" in errors, (method, path)
            if "requestBody" in operation:
                assert {"413", "415", "422"} <= set(errors), (method, path)
            if path.startswith("/v1/"):
                assert {"401", "403"} <= set(errors), (method, path)
            if path.startswith("/v1/") and path != "/v1/families":  # the one that reads no store
                assert "503" in errors, (method, path)
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]


def test_served_as_documented(server: Server) -> None:
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        chunk = '{"x": [[0.1, 0.2, 0.3, 0.4]], "y": [1.0]}'
        for headers in ({"content-type": "text/plain"}, {}):  # a body needs its media type
            response = client.post(f"/v1/comparisons/{cid}/chunks", content=chunk, headers=headers)
            assert_error(response, 415, "unsupported_media_type")
            response = client.post("/v1/comparisons", content='{"name": "x"}', headers=headers)
            assert_error(response, 415, "unsupported_media_type")
        charset = {"content-type": "application/json; charset=utf-8"}
        applied = client.post(f"/v1/comparisons/{cid}/chunks", content=chunk, headers=charset)
        assert applied.status_code == 202, applied.text

        for path, allowed in (
            ("/v1/comparisons", "GET, POST"),
            (f"/v1/comparisons/{cid}", "GET, DELETE"),
            (f"/v1/comparisons/{cid}/chunks", "POST"),
            ("/metrics", "GET"),
        ):
            response = client.request("PATCH", path)
            assert_error(response, 405, "method_not_allowed")
            assert response.headers["allow"] == allowed
        assert client.get("/metrics").headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"family": "linear_regression", "config": {"dim": 2, "columns": [0, 1]}},
            '"columns" goes beside "config", not inside it',
        ),
        (
            {"family": "", "config": {}},
            "does not match any of the expected tags: 'linear_regression'",
        ),
        (
            {"family": "linear_regression", "config": {"dim": "2"}},
            "config.dim: Input should be a valid integer",
        ),
        (
            {"family": "gaussian_mixture", "config": {"dim": 1, "components": 7}},
            "config.components: Input should be less than or equal to 6",
        ),
        (
            {"family": "beta_bernoulli", "prior_probability": "0.5"},
            "prior_probability: Input should be a valid number",
        ),
    ],
)
def test_bad_model_settings_say_what_is_wrong(
    server: Server, model: dict[str, Any], message: str
) -> None:
    body = {"name": "bad", "models": [{"name": "m", **model}]}
    response = httpx.post(f"{server.url}/v1/comparisons", json=body)
    assert_error(response, 422, "invalid_request")
    assert message in response.json()["error"]["message"]


def test_integral_floats_are_integers(server: Server) -> None:
    """JSON Schema counts 2.0 as an integer; so does the API."""
    body = {
        "name": "floats",
        "x_dim": 3.0,
        "models": [
            {
                "name": "m",
                "family": "linear_regression",
                "config": {"dim": 2.0},
                "columns": [0, 2.0],
            }
        ],
    }
    response = httpx.post(f"{server.url}/v1/comparisons", json=body)
    assert response.status_code == 201, response.text
    (model,) = response.json()["models"]
    assert model["config"]["dim"] == 2 and model["columns"] == [0, 2]
    assert response.json()["x_dim"] == 3
