"""A client generated from the served /openapi.json (openapi-python-client) drives the API:
create → chunks → evidence → predict with its typed models, exact evidence back, and errors
parsed into the declared error body."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from service_helpers import exact_log_evidence, regression_data
from service_server import StartServer

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
PACKAGE = "modelcompare_generated_client"


@pytest.fixture
def generated(tmp_path: Path, start_server: StartServer) -> Iterator[tuple[ModuleType, str]]:
    server = start_server("embedded")
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(httpx.get(f"{server.url}/openapi.json").json()))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # its ruff
    finished = subprocess.run(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(tmp_path / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "Warning" not in finished.stdout, finished.stdout  # every schema was understood
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE), server.url
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def test_create_chunks_evidence_predict(generated: tuple[ModuleType, str]) -> None:
    package, url = generated

    def module(name: str) -> ModuleType:
        return importlib.import_module(f"{PACKAGE}.{name}")

    models = module("models")
    create, ingest = module("api.comparisons.create_comparison"), module("api.data.ingest_chunk")
    evidence_of, predict = module("api.data.get_evidence"), module("api.data.predict")

    x, y = regression_data(60)
    x = x[:, :2]  # the models read the first one or two columns
    with package.Client(base_url=url, raise_on_unexpected_status=True) as client:
        created = create.sync(
            client=client,
            body=models.ComparisonIn(
                name="generated",
                estimator=models.ExactEstimator.from_dict({"method": "exact"}),
                models=[
                    models.LinearRegressionIn(
                        name="small",
                        family="linear_regression",
                        config=models.LinearRegressionConfig(dim=1),
                    ),
                    models.LinearRegressionIn(
                        name="large",
                        family="linear_regression",
                        config=models.LinearRegressionConfig(dim=2),
                    ),
                ],
            ),
        )
        assert isinstance(created, models.ComparisonOut)
        assert [m.columns for m in created.models] == [[0], [0, 1]]
        for start in (0, 30):
            applied = ingest.sync(
                created.id,
                client=client,
                wait=True,
                body=models.ChunkIn(
                    x=x[start : start + 30].tolist(), y=y[start : start + 30].tolist()
                ),
            )
            assert isinstance(applied, models.Evidence), applied
        evidence = evidence_of.sync(created.id, client=client)
        assert isinstance(evidence, models.Evidence)
        assert evidence.sequence == 2 and evidence.n_observations == 60
        for model, columns in zip(evidence.models, ([0], [0, 1]), strict=True):
            exact = exact_log_evidence({"dim": len(columns)}, x, y, columns)
            assert model.log_evidence == pytest.approx(exact, rel=1e-9, abs=1e-9)
        probabilities = {m.name: m.posterior_probability for m in evidence.models}
        assert sum(probabilities.values()) == pytest.approx(1.0)

        prediction = predict.sync(created.id, client=client, body=models.PredictIn(x=[[0.3, 0.1]]))
        assert isinstance(prediction, models.Prediction)
        parts = {part.name: part for part in prediction.models}
        mixture = sum(probabilities[name] * part.mean[0] for name, part in parts.items())
        assert prediction.mixture.mean[0] == pytest.approx(mixture, rel=1e-12)

        refused = ingest.sync(
            created.id, client=client, body=models.ChunkIn(x=[[1.0]], y=[0.5])
        )  # one column of two
        assert isinstance(refused, models.ErrorBody)
        assert refused.error.code == "invalid_chunk"
        missing = evidence_of.sync("no-such-id", client=client)
        assert isinstance(missing, models.ErrorBody) and missing.error.code == "not_found"
