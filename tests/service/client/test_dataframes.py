"""The clients take data frames for a comparison by formula: a pandas, a Polars frame and a
pyarrow Table sent through ``ingest`` (one Arrow IPC body each) store the same blocks and
states as the same rows sent as JSON columns, ``predict`` and ``expectation`` take frames of
inputs, and importing the client imports neither pandas nor polars."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from service_server import Server

from modelcompare.service.client import AsyncClient, Client
from modelcompare.service.client.frames import arrow_stream, frame_table, is_frame
from modelcompare.service.store.keys import Keys

GROUPS = ["x", "y", "z"]
SPEC = {"name": "frames", "seed": 3, "estimator": {"method": "sgais", "particles": 16},
        "models": [{"name": "a", "family": "linear_regression", "formula": "target ~ a",
                    "config": {}},
                   {"name": "a_group", "family": "linear_regression",
                    "formula": f"target ~ a + a:C(group, levels={GROUPS})", "config": {}},
                   {"name": "ab", "family": "linear_regression", "formula": "target ~ a + b",
                    "config": {}}]}


def _columns(rows: int, seed: int = 0) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, rows))
    group = [GROUPS[i % 3] for i in range(rows)]
    target = a * np.array([1.0, -1.0, 0.5])[np.arange(rows) % 3] + 0.2 * b + rng.normal(
        size=rows)
    return {"note": [f"row {i}" for i in range(rows)], "group": group, "a": a.tolist(),
            "b": b.tolist(), "target": target.tolist()}


def _stored(server: Server, cid: str) -> dict[str, Any]:
    store, keys = server.redis(), Keys(server.settings.key_prefix, cid)
    return {"blocks": store.lrange(keys.blocks, 0, -1), "states": store.hgetall(keys.states)}


FRAMES = {
    # text as pandas categories, Polars categoricals and an Arrow dictionary: each sent as text
    "pandas": lambda c: pd.DataFrame(c, index=np.arange(len(c["a"])) + 100).astype(
        {"group": "category"}),
    "polars": lambda c: pl.DataFrame(c).with_columns(pl.col("group").cast(pl.Categorical)),
    "pyarrow": lambda c: pa.table({**c, "group": pa.array(c["group"]).dictionary_encode()}),
}


def test_frames_store_what_json_columns_store(embedded_server: Server) -> None:
    first, second = _columns(30, seed=1), _columns(25, seed=2)
    with Client(embedded_server.url) as api, embedded_server.client() as http:
        reference = api.create_comparison(SPEC)["id"]
        for columns in (first, second):
            applied = http.post(f"/v1/comparisons/{reference}/chunks?wait=true",
                                json={"columns": columns})
            assert applied.status_code == 200, applied.text
        expected = (applied.json()["models"], _stored(embedded_server, reference))
        assert len(expected[1]["blocks"]) == 2 and len(expected[1]["states"]) == 3
        for kind, make in FRAMES.items():
            cid = api.create_comparison(SPEC)["id"]
            assert api.ingest(cid, make(first), idempotency_key="first") == {
                "sequence": 1, "rows": 30, "duplicate": False}
            evidence = api.ingest(cid, make(second), wait=True)
            assert (evidence["models"], _stored(embedded_server, cid)) == expected, kind
            # the same rows under the same key, from another library: a duplicate
            again = api.ingest(cid, FRAMES["pyarrow"](first), idempotency_key="first")
            assert again == {"sequence": 1, "rows": 30, "duplicate": True}, kind


def test_predict_and_expectation_take_frames(embedded_server: Server) -> None:
    rows = _columns(40, seed=4)
    query = {k: rows[k][:5] for k in ("group", "a", "b")}
    with Client(embedded_server.url) as api, embedded_server.client() as http:
        cid = api.create_comparison({**SPEC, "estimator": {"method": "exact"}})["id"]
        api.ingest(cid, pa.table(rows), wait=True)
        by_json = http.post(f"/v1/comparisons/{cid}/predict", json={"columns": query}).json()
        for kind, make in FRAMES.items():
            predicted = api.predict(cid, make(query))
            assert isinstance(predicted["mixture"]["mean"], np.ndarray), kind
            assert predicted["mixture"]["mean"].tolist() == by_json["mixture"]["mean"], kind
            assert [m["mean"].tolist() for m in predicted["models"]] == [
                m["mean"] for m in by_json["models"]], kind
        expected = http.post(f"/v1/comparisons/{cid}/expectation", json={
            "model": "a_group", "functional": "predictive", "columns": query,
            "repetitions": 10, "seed": 1}).json()
        got = api.expectation(cid, "a_group", "predictive", FRAMES["polars"](query),
                              repetitions=10, seed=1)
    assert got == expected


def test_the_async_client_sends_frames(embedded_server: Server) -> None:
    rows = _columns(20, seed=5)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with AsyncClient(embedded_server.url) as api:
            cid = (await api.create_comparison(SPEC))["id"]
            evidence = await api.ingest(cid, pd.DataFrame(rows), wait=True)
            return evidence, await api.predict(cid, pl.DataFrame(rows).drop("target"))

    evidence, predicted = asyncio.run(run())
    assert evidence["n_observations"] == 20
    assert predicted["mixture"]["mean"].shape == (20,)


def test_a_frame_carries_its_target_by_name() -> None:
    with Client("http://127.0.0.1:9") as api, pytest.raises(TypeError) as refused:
        api.ingest("cid", pa.table({"a": [1.0]}), [1.0])
    assert str(refused.value) == "a data frame holds its target as a named column: leave out y"


def test_frames_are_sent_as_plain_arrow_columns() -> None:
    """Categoricals decoded, large and view strings as strings, no index and no metadata: the
    body of a pandas and of a Polars frame of the same rows is the same bytes."""
    columns = {"group": ["x", "z", None], "a": [1.0, 2.0, 3.0], "n": [1, 2, 3]}
    plain = pa.schema([("group", pa.string()), ("a", pa.float64()), ("n", pa.int64())])
    pandas = pd.DataFrame(columns, index=[7, 8, 9]).astype({"group": "category"})
    polars = pl.DataFrame(columns).with_columns(pl.col("group").cast(pl.Categorical))
    for frame in (pandas, polars, pa.table(columns), pa.record_batch(columns)):
        assert is_frame(frame)
        table = frame_table(frame)
        assert table.schema == plain and table.schema.metadata is None
        assert table.to_pydict() == columns
    assert arrow_stream(pandas) == arrow_stream(polars) == arrow_stream(pa.table(columns))
    assert not any(is_frame(rows) for rows in (np.ones((2, 2)), [[1.0]], None))


def test_importing_the_client_imports_neither_pandas_nor_polars() -> None:
    code = ("import sys\nimport modelcompare.service.client\n"
            "print(sorted(m for m in ('pandas', 'polars') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
