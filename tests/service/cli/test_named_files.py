"""The command line on a comparison by formula: ``ingest`` reads the columns the formulas name
from a CSV or Parquet file (no --x-cols or --y-col; text where a formula declares levels) and
sends them as Arrow IPC chunks whose keys make a re-run a no-op; ``predict`` reads its inputs
by name; the tables show each model's formula. Errors are one line: a missing column, a level
not declared, --x-cols given. The chunk keys of matrix files are those of before."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import pytest
from rich.console import Console
from service_helpers import run_cli
from service_server import Server

from modelcompare.service.cli.ingest import ChunkKeys
from modelcompare.service.cli.tables import evidence_table
from modelcompare.service.client import Client

GROUPS = ["x", "y", "z"]
FORMULAS = {"a": "target ~ a", "ab": "target ~ a + b",
            "a_group": f"target ~ a + a:C(group, levels={GROUPS})"}
SPEC = {"name": "named", "estimator": {"method": "exact"},
        "models": [{"name": name, "family": "linear_regression", "formula": formula,
                    "config": {}} for name, formula in FORMULAS.items()]}



def _table(rows: int, seed: int = 0) -> pa.Table:
    """Named rows: a text column no model reads, the categorical text "group", a, b, target."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, rows))
    slope = np.array([1.0, -1.0, 0.5])[np.arange(rows) % 3]
    return pa.table({"note": [f"row {i}" for i in range(rows)],
                     "group": [GROUPS[i % 3] for i in range(rows)], "a": a, "b": b,
                     "target": slope * a + 0.2 * b + rng.normal(size=rows)})


def _log_z(api: Client, cid: str) -> dict[str, float]:
    return {m["name"]: m["log_evidence"] for m in api.evidence(cid)["models"]}


def test_ingest_and_predict_by_name(tmp_path: Path, embedded_server: Server,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    table = _table(60)
    pyarrow.csv.write_csv(table.slice(0, 35), tmp_path / "first.csv")
    pyarrow.parquet.write_table(table.slice(35), tmp_path / "second.parquet")
    url = ("--url", embedded_server.url)
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(SPEC)["id"]
        reference = api.create_comparison(SPEC)["id"]
        api.ingest(reference, table, wait=True)
    status, _, err = run_cli(capsys, "ingest", str(tmp_path / "first.csv"), "--comparison", cid,
                          "--chunk-size", "10", *url)
    assert status == 0, err
    assert "sent 35 rows of first.csv in 4 chunks" in err
    status, _, err = run_cli(capsys, "ingest", str(tmp_path / "first.csv"), "--comparison", cid,
                          "--chunk-size", "7", *url)
    assert status == 0, err
    assert "sent no rows of first.csv: all 35 were already ingested (4 chunks): skipped" in err
    status, out, err = run_cli(capsys, "ingest", str(tmp_path / "second.parquet"),
                            "--comparison", cid, *url)
    assert status == 0, err
    assert "sent 25 rows of second.parquet in 1 chunks" in err
    with Client(embedded_server.url) as api:
        got, expected = _log_z(api, cid), _log_z(api, reference)
        assert api.evidence(cid)["n_observations"] == 60
        query = table.select(["group", "a", "b"]).slice(0, 3)
        predicted = api.predict(cid, query)
    assert got == pytest.approx(expected, rel=1e-9)
    names = " ".join(cell for line in err.splitlines() if line.startswith("│")
                     if (cell := line.split("│")[1].strip()))  # the model column, wraps undone
    assert names == " ".join(f"{name} ~ {formula.partition('~ ')[2]}"
                             for name, formula in FORMULAS.items())

    pyarrow.csv.write_csv(table.select(["b", "a", "group"]).slice(0, 3), tmp_path / "query.csv")
    status, out, err = run_cli(capsys, "predict", cid, str(tmp_path / "query.csv"), *url)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == ("row,mean,variance,a:mean,a:variance,ab:mean,ab:variance,"
                        "a_group:mean,a_group:variance")
    for row, line in enumerate(lines[1:]):
        values = [float(v) for v in line.split(",")]
        assert values[:3] == pytest.approx([row, predicted["mixture"]["mean"][row],
                                            predicted["mixture"]["variance"][row]], rel=1e-9)
    assert len(lines) == 4


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status, _, err = run_cli(capsys, *argv)
    assert status == 1 and "Traceback" not in err, err
    (line,) = err.splitlines()
    return line


def test_one_line_errors(tmp_path: Path, embedded_server: Server,
                         capsys: pytest.CaptureFixture[str]) -> None:
    table = _table(12)
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(SPEC)["id"]
    url = ("--url", embedded_server.url)
    pyarrow.csv.write_csv(table.drop_columns(["b"]), tmp_path / "no_b.csv")
    assert _error(capsys, "ingest", str(tmp_path / "no_b.csv"), "--comparison", cid, *url) == (
        "modelcompare: error: no_b.csv has no column 'b', which comparison 'named' reads by "
        "name; its columns are: note, group, a, target")
    groups = table["group"].to_pylist()
    groups[4] = "w"
    pyarrow.csv.write_csv(table.set_column(1, "group", pa.array(groups)), tmp_path / "w.csv")
    assert _error(capsys, "ingest", str(tmp_path / "w.csv"), "--comparison", cid, *url) == (
        "modelcompare: error: column 'group' of w.csv: data row 5 holds 'w', which is not one "
        "of the levels its formula declares ('x', 'y', 'z')")
    numbers = [str(v) for v in table["a"].to_pylist()]
    numbers[6] = "abc"
    pyarrow.csv.write_csv(table.set_column(2, "a", pa.array(numbers)), tmp_path / "text.csv")
    assert _error(capsys, "ingest", str(tmp_path / "text.csv"), "--comparison", cid, *url) == (
        "modelcompare: error: column 'a' of text.csv is not numeric: data row 7 holds 'abc'")
    pyarrow.csv.write_csv(table, tmp_path / "data.csv")
    refusal = ("modelcompare: error: comparison 'named' names its columns in its formulas "
               "(inputs a, b, group; target target): leave out {}")
    assert _error(capsys, "ingest", str(tmp_path / "data.csv"), "--comparison", cid,
                  "--x-cols", "a", "b", *url) == refusal.format("--x-cols")
    assert _error(capsys, "ingest", str(tmp_path / "data.csv"), "--comparison", cid,
                  "--y-col", "target", *url) == refusal.format("--y-col")
    assert _error(capsys, "predict", cid, str(tmp_path / "data.csv"), "--x-cols", "a",
                  *url) == refusal.format("--x-cols")
    with Client(embedded_server.url) as api:
        assert api.get_comparison(cid)["ingested"] == 0  # every refusal came before sending


def test_matrix_files_keep_their_chunk_keys() -> None:
    """The keys of before (pinned from the code before comparisons by formula): a re-run of a
    file sent by an earlier version still finds its chunks."""
    x = np.arange(12, dtype=np.float64).reshape(4, 3) / 7
    y = np.array([0.5, 1.5, -2.0, 3.0])
    keys = ChunkKeys(list(x.T), y, "salt")
    assert [keys.at(start) for start in (0, 1, 3)] == [
        "rows-b37198bde619c73f461fd1ee2529f55c8e03be72",
        "rows-23cc9f3f896ceebc5b743f3896b47d0893edaf50",
        "rows-8c583336160ec753ecfb900bfb49ae23a6da4537"]
    targets = ChunkKeys([], y, "")
    assert [targets.at(start) for start in (0, 2)] == [
        "rows-9c08d4065268b167494eee09b48d9599541a7cc9",
        "rows-d75de0b66a4b79fbc7f1c47df049a6ab3dd657d7"]


def test_text_cells_are_hashed_by_their_utf8_bytes() -> None:
    group = np.array(["x", "é", "z"], dtype=object)
    a, y = np.array([0.25, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])

    def row(i: int) -> bytes:
        text = str(group[i]).encode()
        return len(text).to_bytes(8, "little") + text + a[i].tobytes() + y[i].tobytes()

    expected = hashlib.sha256(b"modelcompare-ingest-v1|x:2|y:True|")
    expected.update(row(0) + row(1))
    expected.update(row(2))
    assert ChunkKeys([group, a], y, "").at(2) == f"rows-{expected.hexdigest()[:40]}"


def test_the_table_keeps_names_whole_and_wraps_formulas_under_them() -> None:
    formula = "target ~ bmi + bp + s5 + C(sex, levels=[1, 2]) + bmi:bp"  # 40 on the right
    name = "feature_set_with_interactions"
    models: list[dict[str, Any]] = [
        {"name": n, "log_evidence": -1234.5, "log_evidence_stderr": 0.25, "n_observations": 442,
         "posterior_probability": 0.5, "ess": 60.0} for n in (name, "small")]
    evidence = {"n_observations": 442, "sequence": 1, "version": 1, "models": models}
    console = Console(record=True, width=80)
    console.print(evidence_table(evidence, {name: formula, "small": "target ~ bmi"}))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 80
    cells = [cell for line in lines if line.startswith("│")
             if (cell := line.split("│")[1].strip())]
    assert cells[:4] == [name, "~ bmi + bp + s5 + C(sex,", "levels=[1, 2]) + bmi:bp", "small"]
    assert cells[4] == "~ bmi"
