"""Schemathesis against the OpenAPI schema of a real server (API keys on): valid and
schema-violating requests to every operation, path ids of live comparisons most of the time; no
answer may be a 5xx. A bounded run for CI; ``python benchmarks/fuzz.py`` runs longer."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis import GenerationMode
from service_server import RunningServer

from service.api.main import create_app
from service.core.config import Settings

KEY = "fuzz-test-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = 30  # per operation, valid and invalid mixed: ~360 cases in all, ~20 s on 2 cores
COMPARISONS: list[dict[str, Any]] = [
    {"name": "regression", "estimator": {"method": "exact"}, "x_dim": 3, "models": [
        {"name": "small", "family": "linear_regression", "config": {"dim": 1}},
        {"name": "large", "family": "linear_regression", "config": {"dim": 3}}]},
    {"name": "coin", "estimator": {"method": "exact"}, "models": [
        {"name": "coin", "family": "beta_bernoulli"}]},
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    settings = Settings(redis_url=None, data_dir=tmp_path_factory.mktemp("fuzz"),
                        api_keys={KEY: {"read": ["*"], "write": ["*"]}}, max_rows=500,
                        max_body_bytes=200_000, wait_timeout=1.0, poll_interval=0.1)
    running = RunningServer(settings)
    with running.handle.client() as client:
        ids = [client.post("/v1/comparisons", json=body, headers=HEADERS).json()["id"]
               for body in COMPARISONS]
    yield running.handle.url, ids
    running.stop()


# The schema comes from the app itself (no server needed at collection); cases go to ``live``.
SLOTS = itertools.count()
schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=EXAMPLES, database="none")


@schema.parametrize()
def test_no_request_gets_a_server_error(case: schemathesis.Case,
                                        live: tuple[str, list[str]]) -> None:
    url, ids = live
    parameters = case.path_parameters or {}
    slot = next(SLOTS) % (len(ids) + 1)  # most cases address a live comparison, some none
    if "cid" in parameters and case.method.upper() != "DELETE" and slot < len(ids):
        parameters["cid"] = ids[slot]
    if case.query and "wait" in case.query:
        case.query["wait"] = "false"  # never block on the worker
    response = case.call(base_url=url, headers=HEADERS, timeout=60)
    assert response.status_code < 500, f"{response.status_code}: {case.as_curl_command()}"
