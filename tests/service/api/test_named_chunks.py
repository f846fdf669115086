"""Chunks by name: the same rows as JSON columns, JSON records, CSV, Parquet and an Arrow IPC
stream make the same stored block (and so the same states, bit for bit), one Idempotency-Key
covers them all, bad rows are refused naming the column, row and value with nothing stored, and
predict and the posterior expectation take rows by name."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from service_helpers import assert_error
from service_server import Server

from modelcompare.service.store.codec import encode_block
from modelcompare.service.store.keys import Keys

CSV = "text/csv"
PARQUET = "application/vnd.apache.parquet"
ARROW = "application/vnd.apache.arrow.stream"
ROWS = 40
FORMULAS = {"ab": "target ~ a + b", "abc": "target ~ a + b + c", "ac": "target ~ a + c + a:c"}


def named_body(seed: int = 5, method: str = "sgais") -> dict[str, Any]:
    return {"name": "named", "seed": seed,
            "models": [{"name": name, "family": "linear_regression", "formula": formula,
                        "config": {"noise_std": 0.8}} for name, formula in FORMULAS.items()],
            "estimator": {"method": method, "particles": 16} if method == "sgais"
            else {"method": method}}


def frame(rows: int = ROWS, seed: int = 0) -> pa.Table:
    """Named rows, with a text column ("note") that no model reads."""
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(3, rows))
    target = 1.0 * a - 0.5 * b + 0.3 + rng.normal(size=rows)
    return pa.table({"note": [f"row {i}" for i in range(rows)], "c": c, "a": a, "b": b,
                     "target": target})


def design_of(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The stored design of FORMULAS by hand: a, b, c, a:c; and the target."""
    a, b, c = (table[name].to_numpy() for name in "abc")
    return np.column_stack([a, b, c, a * c]), table["target"].to_numpy()


def as_csv(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pa_csv.write_csv(table, sink)
    return sink.getvalue()


def as_parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def as_arrow(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=15)  # several batches
    return sink.getvalue().to_pybytes()


def request(table: pa.Table, form: str) -> dict[str, Any]:
    """httpx keyword arguments that send ``table`` in ``form``."""
    if form == "columns":
        return {"json": {"columns": table.to_pydict()}}
    if form == "records":
        return {"json": {"records": table.to_pylist()}}
    body, media = {"csv": (as_csv, CSV), "parquet": (as_parquet, PARQUET),
                   "arrow": (as_arrow, ARROW)}[form]
    return {"content": body(table), "headers": {"content-type": media}}


FORMS = ["columns", "records", "csv", "parquet", "arrow"]


def create(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = client.post("/v1/comparisons", json=body)
    assert created.status_code == 201, created.text
    return created.json()


def stored(server: Server, cid: str) -> dict[str, Any]:
    store, keys = server.redis(), Keys(server.settings.key_prefix, cid)
    return {"blocks": store.lrange(keys.blocks, 0, -1), "states": store.hgetall(keys.states)}


def test_every_form_stores_the_same_block_and_state(embedded_server: Server) -> None:
    table = frame()
    with embedded_server.client() as client:
        results = {}
        for form in FORMS:
            cid = create(client, named_body())["id"]
            for half in (table.slice(0, 25), table.slice(25)):
                applied = client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                                      **request(half, form))
                assert applied.status_code == 200, (form, applied.text)
            results[form] = (applied.json()["models"], stored(embedded_server, cid))
    x, y = design_of(table)
    first_models, first_stored = results["columns"]
    assert first_stored["blocks"] == [encode_block(x[:25], y[:25]), encode_block(x[25:], y[25:])]
    assert len(first_stored["states"]) == len(FORMULAS)
    for form in FORMS[1:]:
        assert results[form] == (first_models, first_stored), form


def test_the_same_key_in_another_format_is_a_duplicate(embedded_server: Server) -> None:
    table = frame(seed=1)
    with embedded_server.client() as client:
        cid = create(client, named_body(method="exact"))["id"]
        key = {"idempotency-key": "rows-1"}
        first = client.post(f"/v1/comparisons/{cid}/chunks", **request(table, "columns"),
                            headers=key)
        assert first.status_code == 202, first.text
        assert first.json() == {"sequence": 1, "rows": ROWS, "duplicate": False}
        for form in FORMS[1:]:
            sent = request(table, form)
            headers = {**sent.pop("headers", {}), **key}
            again = client.post(f"/v1/comparisons/{cid}/chunks", **sent, headers=headers)
            assert again.json() == {"sequence": 1, "rows": ROWS, "duplicate": True}, form
        assert client.get(f"/v1/comparisons/{cid}").json()["ingested"] == 1


def _text(table: pa.Table, column: str, row: int, value: str) -> pa.Table:
    values = [str(v) for v in table[column].to_pylist()]
    values[row] = value
    return table.set_column(table.column_names.index(column), column, pa.array(values))


BAD = [
    ("missing column", lambda t: t.drop_columns(["b"]), "columns", "'b'",
     {"column": "b"}),
    ("text in a number column (JSON)", lambda t: t, "text-json", "'abc'",
     {"column": "a", "row": 3, "value": "abc"}),
    ("text in a number column (CSV)", lambda t: _text(t, "a", 3, "abc"), "csv", "abc",
     {"column": "a", "row": 3, "value": "abc"}),
    ("not finite", lambda t: _text(t, "c", 7, "inf"), "csv",
     "column 'c', row 7 (from 0): inf is not a finite number",
     {"column": "c", "row": 7, "value": "inf"}),
    ("beyond 1e100", lambda t: t.set_column(2, "a", pa.array([1e101] * ROWS)), "parquet",
     "column 'a', row 0 (from 0): 1e+101 is not a finite number within ±1e+100",
     {"column": "a", "row": 0, "value": 1e101}),
]


@pytest.mark.parametrize(("case", "change", "form", "named", "details"), BAD,
                         ids=[case for case, *_ in BAD])
def test_bad_rows_name_the_column_row_and_value(
    embedded_server: Server, case: str, change: Any, form: str, named: str,
    details: dict[str, Any]
) -> None:
    table = change(frame(seed=2))
    with embedded_server.client() as client:
        cid = create(client, named_body(method="exact"))["id"]
        if form == "text-json":
            columns = table.to_pydict()
            columns["a"][3] = "abc"
            sent: dict[str, Any] = {"json": {"columns": columns}}
        else:
            sent = request(table, form)
        refused = client.post(f"/v1/comparisons/{cid}/chunks", **sent)
        assert_error(refused, 422, "invalid_chunk")
        error = refused.json()["error"]
        assert named in error["message"], error
        assert {k: error["details"][k] for k in details} == details, error
        assert client.get(f"/v1/comparisons/{cid}").json()["ingested"] == 0
        assert stored(embedded_server, cid)["blocks"] == []


def test_an_undeclared_level_is_refused_by_name(embedded_server: Server) -> None:
    body = {"name": "levels", "models": [
        {"name": "g", "family": "linear_regression",
         "formula": "target ~ a + C(g, levels=['u', 'v'])", "config": {}}],
        "estimator": {"method": "exact"}}
    table = frame(rows=4).append_column("g", pa.array(["u", "v", "w", "u"]))
    with embedded_server.client() as client:
        cid = create(client, body)["id"]
        for form in FORMS:
            refused = client.post(f"/v1/comparisons/{cid}/chunks", **request(table, form))
            assert_error(refused, 422, "invalid_chunk")
            error = refused.json()["error"]
            assert "'w'" in error["message"], (form, error)
            assert error["details"] == {"column": "g", "row": 2, "value": "w"}, form
        assert client.get(f"/v1/comparisons/{cid}").json()["ingested"] == 0


def test_each_form_is_refused_on_the_other_kind_of_comparison(embedded_server: Server) -> None:
    matrix = {"name": "matrix", "models": [{"name": "m", "family": "linear_regression",
                                            "config": {"dim": 2}}],
              "estimator": {"method": "exact"}}
    table = frame(rows=3)
    with embedded_server.client() as client:
        named = create(client, named_body(method="exact"))["id"]
        refused = client.post(f"/v1/comparisons/{named}/chunks",
                              json={"x": [[1.0, 2.0, 3.0, 4.0]], "y": [1.0]})
        assert_error(refused, 422, "invalid_chunk")
        message = refused.json()["error"]["message"]
        assert message.startswith("this comparison reads its rows by name (a, b, c, target): "
                                  'send {"columns": {"<name>": [...], ...}}'), message
        index = create(client, matrix)["id"]
        for form in FORMS:
            refused = client.post(f"/v1/comparisons/{index}/chunks", **request(table, form))
            assert_error(refused, 422, "invalid_chunk")
            message = refused.json()["error"]["message"]
            assert message.startswith('this comparison reads its rows by position: send JSON '
                                      '{"x": [[...], ...], "y": [...]} (rows of 2 numbers)'), form
        for cid in (named, index):
            assert client.get(f"/v1/comparisons/{cid}").json()["ingested"] == 0
        plain = client.post(f"/v1/comparisons/{named}/chunks", content=as_csv(table),
                            headers={"content-type": "text/plain"})
        assert_error(plain, 415, "unsupported_media_type")
        assert plain.json()["error"]["message"] == (
            "the body must be application/json, text/csv, application/vnd.apache.parquet or "
            "application/vnd.apache.arrow.stream, got text/plain")


def test_too_many_rows_and_too_large_bodies(embedded_server: Server) -> None:
    limit = embedded_server.settings.max_rows
    table = frame(rows=limit + 1)
    with embedded_server.client() as client:
        cid = create(client, named_body(method="exact"))["id"]
        for form in ("parquet", "arrow", "csv", "columns"):
            refused = client.post(f"/v1/comparisons/{cid}/chunks", **request(table, form))
            assert_error(refused, 413, "too_large")
            assert f"rows exceed the limit of {limit}" in refused.json()["error"]["message"] \
                or refused.json()["error"]["message"] == f"more than {limit} rows (the limit)"
        oversize = b"a,b,c,target\n" + b"1,2,3,4\n" * (embedded_server.settings.max_body_bytes
                                                       // 8)
        refused = client.post(f"/v1/comparisons/{cid}/chunks", content=oversize,
                              headers={"content-type": CSV})
        assert_error(refused, 413, "too_large")
        assert client.get(f"/v1/comparisons/{cid}").json()["ingested"] == 0


def _twin(created: dict[str, Any]) -> dict[str, Any]:
    """The same comparison by index ``columns`` over the named one's stored design."""
    return {"name": "twin", "seed": created["seed"], "x_dim": len(created["design"]),
            "estimator": created["estimator"],
            "models": [{"name": m["name"], "family": m["family"], "config": m["config"],
                        "columns": m["columns"]} for m in created["models"]]}


def test_predict_and_expectation_by_name_equal_the_matrix_twin(embedded_server: Server) -> None:
    table, query = frame(seed=3), frame(rows=5, seed=4).drop_columns(["target"])
    x, y = design_of(table)
    qx = design_of(query.append_column("target", pa.array([0.0] * 5)))[0]
    with embedded_server.client() as client:
        named = create(client, named_body())
        assert named["design"] == ["a", "b", "c", "a:c"]
        twin = create(client, _twin(named))
        for cid, sent in ((named["id"], {"json": {"columns": table.to_pydict()}}),
                          (twin["id"], {"json": {"x": x.tolist(), "y": y.tolist()}})):
            applied = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", **sent)
            assert applied.status_code == 200, applied.text
        assert stored(embedded_server, named["id"]) == stored(embedded_server, twin["id"])
        by_matrix = client.post(f"/v1/comparisons/{twin['id']}/predict",
                                json={"x": qx.tolist()})
        assert by_matrix.status_code == 200, by_matrix.text
        for form in ("columns", "records", "arrow"):
            by_name = client.post(f"/v1/comparisons/{named['id']}/predict",
                                  **request(query, form))
            assert by_name.status_code == 200, (form, by_name.text)
            assert by_name.json() == by_matrix.json(), form
        refused = client.post(f"/v1/comparisons/{named['id']}/predict", json={"x": qx.tolist()})
        assert_error(refused, 422, "invalid_chunk")
        assert "reads its rows by name" in refused.json()["error"]["message"]
        expectation = {"model": "ac", "functional": "predictive", "repetitions": 4, "seed": 1}
        expected = client.post(f"/v1/comparisons/{twin['id']}/expectation",
                               json={**expectation, "x": qx.tolist()})
        assert expected.status_code == 200, expected.text
        for form in ("columns", "records"):
            rows = request(query, form)["json"]
            by_name = client.post(f"/v1/comparisons/{named['id']}/expectation",
                                  json={**expectation, **rows})
            assert by_name.status_code == 200, (form, by_name.text)
            assert by_name.json() == expected.json(), form
        missing = client.post(f"/v1/comparisons/{named['id']}/expectation",
                              json={**expectation, "columns": {"a": [1.0]}})
        assert_error(missing, 422, "invalid_chunk")
        assert missing.json()["error"]["details"]["column"] == "b"
