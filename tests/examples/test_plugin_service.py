"""The example plugin in a running service, every part a process of its own: redis-server,
``modelcompare serve`` (API only) and ``modelcompare worker``, the plugin on their PYTHONPATH.
Its families are listed and documented beside the built-ins, compared with them (log Z against
a reference computed here), read over the websocket and on the dashboard; the CLI ingests rows
for them without having the plugin; a worker without it leaves their comparisons waiting."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
import websockets.sync.client
from cluster_processes import wait_for
from example_plugin import DISTRIBUTION, FAMILIES, MODULE, VERSION, with_plugin
from fault_processes import ROOT, ApiServer, Child, RedisServer, WorkerProcess, service_env
from playwright.sync_api import Browser
from service_helpers import by_name, chunks, exact_log_evidence, wait_for_sequence

from modelcompare.estimators.data.history import Rows
from modelcompare.models import build_model, families
from modelcompare.models.conformance.evidence import reference_evidence
from modelcompare.models.registry import built_in

pytestmark = pytest.mark.e2e

SETTINGS = {"lease_ttl": 1.0, "poll_interval": 0.05, "wait_timeout": 60}
ROWS, CHUNK = 600, 100
ROBUST = {"name": "robust", "family": "student_t_regression", "config": {"dim": 2}}
NORMAL = {"name": "normal", "family": "linear_regression", "config": {"dim": 2, "noise_std": 0.8}}


@contextlib.contextmanager
def running(*children: Child) -> Iterator[None]:
    """``children`` started (launched together: their imports overlap), killed at the end."""
    try:
        for child in children:
            child.launch()
        for child in children:
            child.wait_ready()
        yield
    finally:
        for child in children:
            child.kill()


def environments(redis: RedisServer, site: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The environments of service processes under a fresh key prefix: without the plugin, and
    with it."""
    bare = service_env(redis.url, f"plugin-{uuid.uuid4().hex[:8]}", **SETTINGS)
    return bare, with_plugin(bare, site)


def heavy_tailed_rows(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """y = x·(1, −0.5) + 0.2 + 0.5·t₃: regression with outliers, x ~ N(0, I₂)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 2))
    return x, x @ np.array([1.0, -0.5]) + 0.2 + 0.5 * rng.standard_t(3, size=rows)


def count_rows(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Overdispersed counts: y ~ NB(μ, φ = 0.5), log μ = 0.8x + 1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=rows)
    mu, size = np.exp(0.8 * x + 1.0), 2.0
    return x, rng.negative_binomial(size, size / (size + mu)).astype(float)


def write_csv(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    lines = [f"{float(a)!r},{float(b)!r}" for a, b in zip(x, y, strict=True)]
    path.write_text("\n".join(["x1,y", *lines]) + "\n")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="no")
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def api(redis_server: RedisServer, plugin_site: Path) -> Iterator[str]:
    """The API's URL; it and a worker have the plugin."""
    _, env = environments(redis_server, plugin_site)
    server = ApiServer(env)
    with running(server, WorkerProcess(env)):
        yield server.url


@dataclass(frozen=True)
class Compared:
    id: str
    x: np.ndarray
    y: np.ndarray
    evidence: dict[str, Any]


@pytest.fixture(scope="module")
def compared(api: str) -> Compared:
    """Student-t regression (the plugin's) against a normal one (built in), SG-AIS with 64
    particles over 600 heavy-tailed rows in chunks of 100, applied."""
    x, y = heavy_tailed_rows(ROWS, seed=7)
    body = {"name": "robust or not", "seed": 3, "models": [ROBUST, NORMAL],
            "estimator": {"method": "sgais", "particles": 64}}
    with httpx.Client(base_url=api, timeout=60) as client:
        reply = client.post("/v1/comparisons", json=body)
        assert reply.status_code == 201, reply.text
        cid = reply.json()["id"]
        for chunk in chunks(x, y, CHUNK):
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        evidence = wait_for_sequence(client, cid, ROWS // CHUNK, timeout=120)
    return Compared(cid, x, y, evidence)


def test_families_lists_the_plugin_beside_the_built_ins(api: str, plugin_imported: Path) -> None:
    listed = httpx.get(f"{api}/v1/families", timeout=30).json()
    assert listed["unavailable"] == {}
    found = {f["family"]: f for f in listed["families"]}
    built_ins = {model.family for model in built_in()}
    assert set(found) == built_ins | set(FAMILIES)
    for name in built_ins:
        assert (found[name]["package"], found[name]["version"]) == ("modelcompare",
                                                                    version("modelcompare"))
    for name in FAMILIES:
        assert (found[name]["package"], found[name]["version"]) == (DISTRIBUTION, VERSION)
        schema = families().get(name).model.Config.model_json_schema()
        assert found[name]["config_schema"] == schema
    assert set(found["negative_binomial_regression"]["config_schema"]["properties"]) == {
        "dim", "prior_std", "dispersion_scale"}


def test_the_openapi_document_has_the_plugins_variants(api: str) -> None:
    schemas = httpx.get(f"{api}/openapi.json", timeout=30).json()["components"]["schemas"]
    models = schemas["ComparisonIn"]["properties"]["models"]["items"]
    variants = {"student_t_regression": "StudentTRegression",
                "negative_binomial_regression": "NegativeBinomialRegression"}
    for family, name in variants.items():
        assert models["discriminator"]["mapping"][family] == f"#/components/schemas/{name}In"
        assert {"$ref": f"#/components/schemas/{name}In"} in models["oneOf"]
        assert schemas[f"{name}In"]["properties"]["family"]["const"] == family
    assert set(schemas["StudentTRegressionConfig"]["properties"]) == {
        "dim", "dof", "prior_std", "noise_scale"}


def test_the_plugins_log_z_matches_a_reference(api: str, compared: Compared,
                                               plugin_imported: Path) -> None:
    """SG-AIS's log Z of the plugin's model within 2 standard errors of the Laplace importance
    sampling reference (models/conformance/evidence.py), the error combining both methods';
    the built-in model's within 2 of its closed form."""
    described = httpx.get(f"{api}/v1/comparisons/{compared.id}", timeout=30).json()
    models = {m["name"]: m for m in described["models"]}
    assert (models["robust"]["package"], models["robust"]["version"]) == (DISTRIBUTION, VERSION)
    assert (models["normal"]["package"], models["normal"]["version"]) == (
        "modelcompare", version("modelcompare"))
    assert models["robust"]["target"] == {"kind": "real", "classes": None}
    evidence = by_name(compared.evidence)
    assert [evidence[n]["n_observations"] for n in ("robust", "normal")] == [ROWS, ROWS]
    assert all(math.isfinite(m["log_evidence"]) and m["log_evidence_stderr"] > 0
               for m in evidence.values())

    rows = Rows(torch.from_numpy(compared.x), torch.from_numpy(compared.y))
    model = build_model(ROBUST["family"], **ROBUST["config"])
    reference, reference_error, method = reference_evidence(
        model, rows, torch.Generator().manual_seed(0))
    robust = evidence["robust"]
    spread = math.hypot(robust["log_evidence_stderr"], reference_error)
    print(f"student_t_regression log Z: SG-AIS {robust['log_evidence']:.3f} ± "
          f"{robust['log_evidence_stderr']:.3f}, {method} {reference:.3f} ± "
          f"{reference_error:.3f}: z = {(robust['log_evidence'] - reference) / spread:.2f}")
    assert method == "Laplace importance sampling"
    assert abs(robust["log_evidence"] - reference) <= 2 * spread

    exact = exact_log_evidence(NORMAL["config"], compared.x, compared.y, [0, 1])
    normal = evidence["normal"]
    print(f"linear_regression log Z: SG-AIS {normal['log_evidence']:.3f} ± "
          f"{normal['log_evidence_stderr']:.3f}, exact {exact:.3f}")
    assert abs(normal["log_evidence"] - exact) <= 2 * normal["log_evidence_stderr"]
    assert robust["posterior_probability"] > 0.99  # the outliers: about 25 nats apart


def test_the_websocket_snapshot_shows_both_models(api: str, compared: Compared) -> None:
    url = f"{api.replace('http://', 'ws://')}/v1/comparisons/{compared.id}/ws"
    with websockets.sync.client.connect(url, open_timeout=10) as ws:
        message = json.loads(ws.recv(timeout=10))
    assert message["type"] == "snapshot"
    assert message["evidence"]["version"] == compared.evidence["version"]
    sent = {m["name"]: (m["family"], m["log_evidence"]) for m in message["evidence"]["models"]}
    assert sent == {m["name"]: (m["family"], m["log_evidence"])
                    for m in compared.evidence["models"]}


def test_the_dashboard_shows_both_models(api: str, compared: Compared, browser: Browser) -> None:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{api}/#{compared.id}")
        page.wait_for_selector("#evidence-table tbody tr")
        for model in compared.evidence["models"]:
            cells = page.locator(f"#evidence-table tr[data-model={model['name']}] td")
            assert cells.nth(0).inner_text().split() == [model["name"], model["family"]]
            log_z, stderr = (float(v) for v in cells.nth(1).inner_text().split(" ± "))
            assert log_z == pytest.approx(model["log_evidence"], abs=0.0051)
            assert stderr == pytest.approx(model["log_evidence_stderr"], abs=0.0051)
            assert cells.nth(5).inner_text() == str(ROWS)
    finally:
        page.close()
    assert errors == []


def run_without_plugin(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python argv`` in a process that has not the plugin (nor any MODELCOMPARE_ setting of
    this one), from the repository root."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MODELCOMPARE_") and k != "REDIS_URL"}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def run_cli_without_plugin(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_without_plugin("-m", "modelcompare", "--log-level", "warning", *argv)


def create_counts_comparison(api: str, name: str) -> str:
    body = {"name": name, "models": [
        {"name": "counts", "family": "negative_binomial_regression", "config": {"dim": 1}},
        {"name": "poisson", "family": "poisson_regression", "config": {"dim": 1}}]}
    reply = httpx.post(f"{api}/v1/comparisons", json=body, timeout=30)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def test_the_cli_ingests_rows_for_a_family_it_has_not(api: str, tmp_path: Path) -> None:
    lacking = run_without_plugin("-c", f"import {MODULE}")
    assert f"No module named '{MODULE}'" in lacking.stderr
    cid = create_counts_comparison(api, "counts")
    x, y = count_rows(200, seed=5)
    write_csv(tmp_path / "counts.csv", x, y)
    done = run_cli_without_plugin("ingest", str(tmp_path / "counts.csv"), "--comparison", cid,
                                  "--x-cols", "x1", "--y-col", "y", "--chunk-size", "100",
                                  "--url", api)
    assert done.returncode == 0, done.stderr
    assert "sent 200 rows of counts.csv in 2 chunks" in done.stderr
    evidence = httpx.get(f"{api}/v1/comparisons/{cid}/evidence", timeout=30).json()
    assert evidence["sequence"] == 2 and evidence["status"] == "ok"
    assert [m["n_observations"] for m in evidence["models"]] == [200, 200]
    assert all(math.isfinite(m["log_evidence"]) for m in evidence["models"])


def test_the_cli_refuses_a_negative_count_naming_its_row(api: str, tmp_path: Path) -> None:
    cid = create_counts_comparison(api, "negative count")
    x, y = count_rows(20, seed=6)
    y[3] = -1.0
    write_csv(tmp_path / "counts.csv", x, y)
    done = run_cli_without_plugin("ingest", str(tmp_path / "counts.csv"), "--comparison", cid,
                                  "--x-cols", "x1", "--y-col", "y", "--url", api)
    assert done.returncode == 1
    assert done.stderr == (
        "modelcompare: error: model 'counts' refuses data row 4 of counts.csv, y = -1: "
        "negative_binomial_regression needs y to be non-negative integers\n")
    assert httpx.get(f"{api}/v1/comparisons/{cid}", timeout=30).json()["ingested"] == 0


def described(api: str, cid: str) -> dict[str, Any]:
    return dict(httpx.get(f"{api}/v1/comparisons/{cid}", timeout=30).json())


def test_a_worker_without_the_plugin_leaves_its_comparisons_waiting(
        redis_server: RedisServer, plugin_site: Path) -> None:
    """The API has the plugin, the only worker has not: it applies a built-in comparison's
    chunk and leaves the plugin's comparison waiting, saying which family it lacks, until a
    worker with the plugin applies it."""
    bare, env = environments(redis_server, plugin_site)
    server = ApiServer(env)
    x, y = heavy_tailed_rows(50, seed=8)
    chunk = {"x": x.tolist(), "y": y.tolist()}
    with running(server, WorkerProcess(bare)):
        api = server.url
        ids = {}
        for name, model, method in (("plugin", ROBUST, "sgais"), ("built in", NORMAL, "exact")):
            body = {"name": name, "models": [model], "estimator": {"method": method}}
            ids[name] = httpx.post(f"{api}/v1/comparisons", json=body, timeout=30).json()["id"]
            assert httpx.post(f"{api}/v1/comparisons/{ids[name]}/chunks", json=chunk,
                              timeout=30).status_code == 202
        wait_for(lambda: described(api, ids["built in"])["sequence"] == 1,
                 "the worker did not apply the built-in comparison's chunk")
        wait_for(lambda: described(api, ids["plugin"])["status"] != "ok",
                 "the plugin's comparison shows no status but ok", timeout=20)
        waiting = described(api, ids["plugin"])
        assert (waiting["status"], waiting["sequence"]) == ("waiting", 0), waiting
        assert "student_t_regression" in waiting["status_reason"]
        with running(WorkerProcess(env)):
            wait_for(lambda: described(api, ids["plugin"])["sequence"] == 1,
                     "the worker with the plugin did not apply the waiting chunk")
        applied = described(api, ids["plugin"])
        assert (applied["status"], applied["status_reason"]) == ("ok", None)
