"""``GET /v1/families`` and what a comparison records of its families."""

from __future__ import annotations

import json
from importlib.metadata import version

import httpx
from service_server import Server

from modelcompare.models import FAMILIES
from modelcompare.service.client import Client
from modelcompare.service.store.keys import Keys


def test_every_family_is_listed_with_its_package_and_schema(embedded_server: Server) -> None:
    with Client(embedded_server.url) as api:
        listed = api.families()
    assert [f["family"] for f in listed["families"]] == sorted(FAMILIES)
    assert listed["unavailable"] == {}
    own = version("modelcompare")
    for family in listed["families"]:
        record = FAMILIES[family["family"]].Config
        assert (family["package"], family["version"]) == ("modelcompare", own)
        assert family["config_schema"] == record.model_json_schema()
        assert family["description"]


def test_a_comparison_records_package_version_and_target(embedded_server: Server) -> None:
    body = {"name": "recorded", "models": [
        {"name": "counts", "family": "poisson_regression", "config": {"dim": 1}},
        {"name": "labels", "family": "logistic_regression", "config": {"dim": 1, "classes": 3}},
    ]}
    with Client(embedded_server.url) as api:
        described = api.get_comparison(api.create_comparison(body)["id"])
    own = version("modelcompare")
    assert [(m["package"], m["version"], m["target"]) for m in described["models"]] == [
        ("modelcompare", own, {"kind": "count", "classes": None}),
        ("modelcompare", own, {"kind": "label", "classes": 3}),
    ]


def test_a_server_without_a_family_answers_503_and_changes_nothing(
        embedded_server: Server) -> None:
    body = {"name": "plugin", "models": [
        {"name": "plain", "family": "linear_regression", "config": {"dim": 1}},
        {"name": "robust", "family": "linear_regression", "config": {"dim": 1}},
    ]}
    store = embedded_server.redis()
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(body)["id"]
        keys = Keys(embedded_server.settings.key_prefix, cid)
        spec = json.loads(store.hget(keys.meta, "spec"))
        spec["models"][1].update(family="student_t_regression", package="example-models",
                                 version="1.0.0", target={"kind": "real", "classes": None})
        store.hset(keys.meta, "spec", json.dumps(spec))
        reason = ("model 'robust': family 'student_t_regression' (example-models) is not "
                  "installed here")
        with httpx.Client(base_url=embedded_server.url) as http:
            for method, path, json_body in (
                ("POST", "chunks", {"x": [[0.5]], "y": [1.0]}),
                ("POST", "predict", {"x": [[0.5]]}),
                ("POST", "models", {"name": "third", "family": "linear_regression",
                                    "config": {"dim": 1}}),
            ):
                response = http.request(method, f"/v1/comparisons/{cid}/{path}", json=json_body)
                assert response.status_code == 503, response.text
                error = response.json()["error"]
                assert error["code"] == "family_unavailable"
                assert error["details"] == {"reason": reason}
                assert error["message"].startswith("this server cannot build 'robust': family")
        described = api.get_comparison(cid)
        assert (described["ingested"], described["version"]) == (0, 0)
        assert [m["name"] for m in described["models"]] == ["plain", "robust"]
        assert described["models"][1]["package"] == "example-models"
        assert cid in {c["id"] for c in api.list_comparisons(limit=500)["comparisons"]}
