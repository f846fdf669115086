"""The console script: ``serve`` (embedded Redis + worker; one server per data folder),
``worker`` (killed with SIGKILL and replaced: same final bits), ``demo`` (the right model wins),
and the client commands ``create``, ``add-model``, ``remove-model``, ``ingest`` (CSV and
Parquet, exact numbers, the whole file checked first, text labels, re-runs that send nothing
twice whatever the chunk size, partial sends), ``watch``, ``list``, ``delete``, ``predict``,
with one-line errors that name the row and the value."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet
import pytest
import yaml
from rich.console import Console
from service_helpers import (
    by_name,
    chunks,
    comparison_body,
    exact_log_evidence,
    regression_data,
    run_cli,
)
from service_server import (
    LOCAL_REDIS,
    Server,
    StartServer,
    create_and_ingest,
    drain,
    free_port,
    make_worker,
    states,
)

from modelcompare.service.cli import main
from modelcompare.service.cli.tables import evidence_table
from modelcompare.service.client import Client, ModelCompareError
from modelcompare.service.embedded import DataFolderInUse, EmbeddedRedis
from modelcompare.service.store.keys import GROUP, Keys

BIN = Path(sys.executable).parent


def _serve(folder: Path, port: int, stderr: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MODELCOMPARE_REDIS_URL")}
    return subprocess.Popen([str(BIN / "modelcompare"), "serve", "--port", str(port)], cwd=folder,
                            env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


def _wait_ready(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.1)


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully
    assert process.wait(timeout=30) in (0, -signal.SIGTERM)


@pytest.mark.e2e
def test_serve_runs_everything_with_an_embedded_redis(tmp_path: Path) -> None:
    """One ``serve`` runs API, Redis and worker; a second one in the same folder refuses to
    start (it would share the first one's Redis, and lose it when the first stops) with one
    line, and the first goes on serving."""
    port = free_port()
    process = _serve(tmp_path, port)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, process)
        second = _serve(tmp_path, free_port(), stderr=subprocess.PIPE)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert err == (f"modelcompare: error: another modelcompare server (pid {process.pid}) is "
                       f"using the data folder {tmp_path.resolve() / '.modelcompare'}, and its "
                       "embedded Redis cannot be shared. Stop that server, give this one its own "
                       "folder (--data-dir or MODELCOMPARE_DATA_DIR), or run both on one Redis "
                       "server (--redis-url or REDIS_URL)\n")
        x, y = regression_data(30)
        with httpx.Client(base_url=url, timeout=60) as client:
            cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
            body = chunks(x, y, 30)[0]
            done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=body)
        assert done.status_code == 200 and done.json()["n_observations"] == 30
    finally:
        _stop(process)
    assert (tmp_path / ".modelcompare" / "redis.db").is_file()  # saved at shutdown
    again = _serve(tmp_path, port)  # the folder is free again, with its data
    try:
        _wait_ready(url, again)
        assert httpx.get(f"{url}/v1/comparisons/{cid}/evidence").json()["n_observations"] == 30
    finally:
        _stop(again)


def _worker(prefix: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": LOCAL_REDIS, "MODELCOMPARE_KEY_PREFIX": prefix,
           "MODELCOMPARE_LEASE_TTL": "0.5", "MODELCOMPARE_POLL_INTERVAL": "0.05",
           "MODELCOMPARE_BATCH_CHUNKS": "1"}
    return subprocess.Popen([str(BIN / "modelcompare"), "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.e2e
def test_sigkilled_worker_is_replaced_and_the_bits_match(start_server: StartServer) -> None:
    """A real ``modelcompare worker`` process is SIGKILLed mid-stream; a second one takes over.
    (The exact estimator keeps this fast; RNG-driven SG-AIS recovery is in worker/test_worker.py.)
    """
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    body = comparison_body("exact")
    total = 80  # the first worker is killed at about 10: plenty left for the second
    with server.client() as client:
        reference = create_and_ingest(client, body, 10 * total, 10, seed=9)
        drain(make_worker(server, "solo"), store, Keys(prefix, reference), total)
        cid = create_and_ingest(client, body, 10 * total, 10, seed=9)
    keys = Keys(prefix, cid)
    first = _worker(prefix)
    try:
        deadline = time.monotonic() + 60
        while int(store.hget(keys.meta, "sequence")) < 10:
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        first.kill()
    killed_at = int(store.hget(keys.meta, "sequence"))
    assert killed_at < total, "the worker finished before it could be killed"
    second = _worker(prefix)
    try:
        deadline = time.monotonic() + 60
        while int(store.hget(keys.meta, "sequence")) < total:
            assert time.monotonic() < deadline and second.poll() is None
            time.sleep(0.05)
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert states(store, keys) == states(store, Keys(prefix, reference))
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
    assert store.llen(keys.trace) == total


@pytest.mark.e2e
def test_demo_finishes_with_a_true_input_model_as_winner(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "modelcompare"), "demo", "--rows", "200", "--chunk", "100",
         "--particles", "16", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "COLUMNS": "120", "MODELCOMPARE_TORCH_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    # SG-AIS must pick a model with the true inputs (after 200 rows the useless-extra-input model
    # trails the right one by only 2.7 nats, within estimator noise); the oracle must be exact.
    winner = result.stdout.split("Winner: ")[1].split()[0]
    assert winner in ("right_inputs", "extra_useless_input"), result.stdout
    assert "its winner is right_inputs" in result.stdout



def _write_data(tmp_path: Path, rows: int) -> tuple[Path, Path, Any, Any]:
    """The same rows split over a CSV (first half, with a text column) and a Parquet file."""
    x, y = regression_data(rows, seed=8)
    half = rows // 2
    csv = tmp_path / "first.csv"
    lines = ["site,a,b,c,d,target"] + [
        f"s{i},{','.join(repr(float(v)) for v in x[i])},{float(y[i])!r}" for i in range(half)]
    csv.write_text("\n".join(lines) + "\n")
    parquet = tmp_path / "second.parquet"
    columns = {name: x[half:, j] for j, name in enumerate("abcd")}
    pyarrow.parquet.write_table(pa.table({**columns, "target": y[half:]}), parquet)
    return csv, parquet, x, y


@pytest.mark.slow
def test_create_ingest_and_watch(tmp_path: Path, embedded_server: Server,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = embedded_server
    url = ("--url", server.url)
    body = comparison_body("exact")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(body))
    status, out, err = run_cli(capsys, "create", str(spec), *url)
    assert status == 0, err
    cid = out.strip()
    assert "created comparison regression with 3 models" in err

    csv, parquet, x, y = _write_data(tmp_path, 90)
    columns = ("--x-cols", "a", "b", "c", "d", "--y-col", "target")
    status, _, err = run_cli(capsys, "ingest", str(csv), "--comparison", cid, *columns,
                          "--chunk-size", "20", *url)
    assert status == 0, err
    assert "sent 45 rows of first.csv in 3 chunks" in err
    # the progress bars count rows, sent and applied (not chunks)
    assert re.search(r"sent .*45/45 rows", err) and re.search(r"applied .*45/45 rows", err)
    for size in ("20", "7", "100"):  # a re-run adds nothing, however the file is cut
        status, _, err = run_cli(capsys, "ingest", str(csv), "--comparison", cid, *columns,
                              "--chunk-size", size, *url)
        assert status == 0, err
        assert "sent no rows of first.csv: all 45 were already ingested (3 chunks): skipped" \
            in err
    status, _, err = run_cli(capsys, "ingest", str(parquet), "--comparison", cid, "--x-cols",
                          "a,b,c,d", "--y-col", "target", "--chunk-size", "45", *url)
    assert status == 0, err

    with Client(server.url) as api:
        evidence = api.evidence(cid)
    assert evidence["n_observations"] == 90 and evidence["sequence"] == 4
    for model in body["models"]:
        exact = exact_log_evidence(model["config"], x, y, list(range(model["config"]["dim"])))
        assert by_name(evidence)[model["name"]]["log_evidence"] == pytest.approx(exact, abs=1e-8)

    status, out, err = run_cli(capsys, "watch", cid, "--count", "1", *url)
    assert status == 0, err
    assert "90 rows, 4 chunks, version 4, status ok" in out
    best = max(evidence["models"], key=lambda m: m["posterior_probability"])
    assert f"{best['posterior_probability']:.4f}" in out and best["name"] in out


@pytest.mark.slow
def test_watch_follows_updates(embedded_server: Server,
                               capsys: pytest.CaptureFixture[str]) -> None:
    server = embedded_server
    x, y = regression_data(20, seed=2)
    with Client(server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        result: list[tuple[int, str, str]] = []
        watcher = threading.Thread(target=lambda: result.append(
            run_cli(capsys, "watch", cid, "--count", "2", "--url", server.url)))
        watcher.start()
        for start in range(20):  # until the watcher has seen its snapshot and one update
            api.ingest(cid, x[start : start + 1], y[start : start + 1], wait=True)
            watcher.join(timeout=0.3)
            if not watcher.is_alive():
                break
    assert not watcher.is_alive()
    ((status, out, err),) = result
    assert status == 0, err
    # the table shows the update after the snapshot: one or more of the one-row chunks
    rows, sequence, version = map(int, re.findall(r"(\d+) rows, (\d+) chunks, version (\d+)",
                                                  out)[-1])
    assert 1 <= rows == sequence == version <= start + 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["create", "{tmp}/missing.yaml"], "no such file: {tmp}/missing.yaml"),
        (["create", "{tmp}/bad.json"], "{tmp}/bad.json is not valid JSON"),
        (["create", "{tmp}/list.yaml"], "must hold one mapping"),
        (["create", "{tmp}/spec.yaml"],
         "the server refused: invalid_request: body.models: List should have at least 1"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "a", "nope",
          "--y-col", "target"], "first.csv has no column 'nope'; its columns are: site, a, b,"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "site"],
         "column 'site' of first.csv is not numeric: data row 1 holds 's0'"),
        (["ingest", "{tmp}/holes.csv", "--comparison", "{cid}", "--y-col", "y"],
         "column 'y' of holes.csv has 1 missing or non-finite values (first at data row 2: nan)"),
        (["ingest", "{tmp}/header.csv", "--comparison", "{cid}", "--x-cols", "a", "b", "c", "d",
          "--y-col", "target"], "header.csv has no data rows (only a header): nothing to send"),
        (["ingest", "{tmp}/first.csv", "--comparison", "nope", "--x-cols", "a", "b", "c", "d",
          "--y-col", "target"], "the server refused: not_found: no comparison with id 'nope'"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "a",
          "--y-col", "target"], "comparison 'regression' takes 4 input columns (x_dim; right "
         "reads columns [0, 1, 2]; too_few reads columns [0, 1]; wrong_noise reads columns "
         "[0, 1, 2]), but --x-cols names 1: a"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "a", "b", "c", "d"],
         "comparison 'regression' needs a target: name it with --y-col"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "a", "b", "c", "d",
          "--y-col", "site"], "column 'site' of first.csv holds labels (s0, s1, s2, s3, s4), but "
         "these models need numbers: right (linear_regression), too_few (linear_regression), "
         "wrong_noise (linear_regression)"),
        (["predict", "{cid}", "--x", "1,2", "--x", "3"],
         "every --x row needs the same number of values"),
        (["delete", "nope"], "the server refused: not_found: no comparison with id 'nope'"),
        (["remove-model", "{cid}", "nope"],
         "the server refused: not_found: no model 'nope' in comparison '{cid}'"),
        (["add-model", "{cid}", "{tmp}/list.yaml"], "list.yaml must hold one model (name, "
         "family, config, columns or formula, prior_probability)"),
        (["watch", "nope"], "the server refused: not_found: no comparison with id 'nope'"),
        (["watch", "{cid}", "--url", "http://127.0.0.1:9"],
         "cannot reach http://127.0.0.1:9: "),
    ],
)
def test_errors_are_one_line_without_traceback(
    argv: list[str], message: str, tmp_path: Path, embedded_server: Server,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = embedded_server
    with Client(server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
    _write_data(tmp_path, 10)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "empty", "models": []}))
    (tmp_path / "holes.csv").write_text("y\n1.0\nnan\n2.0\n")
    (tmp_path / "header.csv").write_text("a,b,c,d,target\n")
    fill = {"tmp": str(tmp_path), "cid": cid}
    argv = [a.format(**fill) for a in argv]
    if "--url" not in argv:
        argv += ["--url", server.url]
    status, _, err = run_cli(capsys, *argv)
    assert status == 1
    last = err.rstrip("\n").split("\n")[-1]  # after the progress bar, if it had started
    assert last.startswith("modelcompare: error: ") and message.format(**fill) in last, err
    assert "Traceback" not in err


def _csv(path: Path, header: str, rows: list[list[Any]]) -> Path:
    path.write_text("\n".join([header] + [",".join(repr(v) if isinstance(v, float) else str(v)
                                                   for v in row) for row in rows]) + "\n")
    return path


@pytest.mark.slow
def test_a_partial_send_is_reported_and_a_rerun_with_another_chunk_size_completes_it(
    tmp_path: Path, start_server: StartServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server refuses the third chunk (its body is over the size limit): the CLI says which
    rows are in; a re-run cut into smaller chunks skips exactly those and sends the rest, so
    every row counts once (the exact evidence of all 60 rows)."""
    x, y = regression_data(60, seed=12)
    x[:20], y[:20] = x[:20].round(1), y[:20].round(1)  # short numbers: small bodies
    rows = [[*map(float, x[i]), float(y[i])] for i in range(60)]

    def body_bytes(start: int, stop: int) -> int:
        return len(json.dumps({"x": x[start:stop].tolist(), "y": y[start:stop].tolist()}))

    limit = max(body_bytes(0, 10), body_bytes(10, 20), *(body_bytes(i, i + 4)
                                                         for i in range(20, 60, 4))) + 20
    assert body_bytes(20, 30) > limit  # the third chunk of 10 rows is refused
    server = start_server("embedded", max_body_bytes=limit)
    with Client(server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
    data = _csv(tmp_path / "data.csv", "a,b,c,d,y", rows)
    command = ("ingest", str(data), "--comparison", cid, "--x-cols", "a", "b", "c", "d",
               "--y-col", "y", "--url", server.url)
    status, _, err = run_cli(capsys, *command, "--chunk-size", "10")
    assert status == 1
    note, error = err.rstrip("\n").split("\n")[-2:]
    assert note == ("stopped at data row 21: data rows 1–20 of data.csv are on the server and "
                    "count; rows 21–30 were not. Fix what the error says and run the same "
                    "command again: rows already on the server are skipped, not counted twice")
    assert error.startswith("modelcompare: error: the server refused: too_large: body exceeds")
    x[29, 0] = rows[29][0] = 0.5  # "fix" a row past the accepted ones: their keys do not change
    _csv(tmp_path / "data.csv", "a,b,c,d,y", rows)
    status, _, err = run_cli(capsys, *command, "--chunk-size", "4")
    assert status == 0, err
    assert "sent 40 rows of data.csv in 10 chunks; 20 rows (2 chunks) were already ingested: " \
        "skipped" in err
    with Client(server.url) as api:
        evidence = api.evidence(cid)
        assert api.get_comparison(cid)["ingested"] == 12
    assert evidence["n_observations"] == 60
    for model in comparison_body("exact")["models"]:
        exact = exact_log_evidence(model["config"], x, y, list(range(model["config"]["dim"])))
        assert by_name(evidence)[model["name"]]["log_evidence"] == pytest.approx(exact, abs=1e-8)

    rows[2][0] += 1.0  # the same first row, other values later: not a re-run of that file
    _csv(tmp_path / "data.csv", "a,b,c,d,y", rows)
    status, _, err = run_cli(capsys, *command, "--chunk-size", "7")
    assert status == 1
    assert err.rstrip("\n").split("\n")[-1] == (
        "modelcompare: error: data rows 1–10 were sent before with other values under the same "
        "key: this file is not a re-run of that one; if this file is new data that begins with "
        "the same rows, send it with --key-salt")
    with Client(server.url) as api:
        assert api.get_comparison(cid)["ingested"] == 12  # nothing was sent


def test_the_whole_file_is_checked_before_anything_is_sent(
    tmp_path: Path, embedded_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = regression_data(40, seed=13)
    rows = [[*map(float, x[i]), float(y[i])] for i in range(40)]
    rows[24][1] = 1e300
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
    data = _csv(tmp_path / "data.csv", "a,b,c,d,y", rows)
    command = ("ingest", str(data), "--comparison", cid, "--x-cols", "a", "b", "c", "d",
               "--y-col", "y", "--chunk-size", "20", "--url", embedded_server.url)
    status, _, err = run_cli(capsys, *command)
    assert status == 1
    assert err == ("modelcompare: error: column 'b' of data.csv has values beyond ±1e+100, which "
                   "the server refuses (first at data row 25: 1e+300)\n")
    with Client(embedded_server.url) as api:
        assert api.get_comparison(cid)["ingested"] == 0  # not even the first 20 rows
    rows[24][1] = float(x[24, 1])
    _csv(tmp_path / "data.csv", "a,b,c,d,y", rows)
    status, _, err = run_cli(capsys, *command)
    assert status == 0 and "sent 40 rows of data.csv in 2 chunks" in err
    with Client(embedded_server.url) as api:
        assert api.evidence(cid)["n_observations"] == 40


def test_text_labels_are_numbered_and_refused_labels_name_the_row(
    tmp_path: Path, embedded_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {"name": "iris", "seed": 0, "estimator": {"method": "sgais", "particles": 16},
            "models": [{"name": "petal", "family": "logistic_regression",
                        "config": {"dim": 1, "classes": 3}, "columns": [1]},
                       {"name": "prior_only", "family": "logistic_regression",
                        "config": {"dim": 0, "classes": 3}}], "x_dim": 2}
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(spec)["id"]
    species = ["setosa", "versicolor", "virginica"]
    rows = [[5.0 + 0.1 * i, 1.0 + 0.2 * i, species[i % 3]] for i in range(30)]

    def ingest(name: str, *extra: str) -> tuple[int, str]:
        status, _, err = run_cli(capsys, "ingest", str(tmp_path / name), "--comparison", cid,
                              "--x-cols", "sepal", "petal", "--y-col", "species", "--no-wait",
                              "--url", embedded_server.url, *extra)
        return status, err

    _csv(tmp_path / "four.csv", "sepal,petal,species",
         [*rows[:24], [6.0, 2.0, "bogus"], *rows[25:]])
    status, err = ingest("four.csv")
    assert status == 1
    assert err.split("\n")[:2] == [
        "labels of column 'species' → classes: bogus = 0, setosa = 1, versicolor = 2, "
        "virginica = 3",
        "modelcompare: error: model 'petal' refuses data row 3 of four.csv, y = 3: "
        "logistic_regression needs integer labels in [0, 3) (label 'virginica'; the file has 4 "
        "labels, numbered from 0)"]
    status, err = ingest("four.csv", "--labels", *species)
    assert status == 1 and err == (
        "modelcompare: error: column 'species' of four.csv: data row 25 holds 'bogus', which is "
        "not one of --labels (setosa, versicolor, virginica)\n")
    for value, shown in (("3", "3"), ("1.5", "1.5")):
        numbers = [[s, p, species.index(label)] for s, p, label in rows]
        numbers[24][2] = value
        _csv(tmp_path / "numbers.csv", "sepal,petal,species", numbers)
        status, err = ingest("numbers.csv")
        assert status == 1 and err == (
            f"modelcompare: error: model 'petal' refuses data row 25 of numbers.csv, y = {shown}:"
            " logistic_regression needs integer labels in [0, 3); class labels are whole numbers "
            "from 0 (text labels are numbered for you: sorted, or in --labels order)\n")
    with Client(embedded_server.url) as api:
        assert api.get_comparison(cid)["ingested"] == 0  # every refusal came before sending

    _csv(tmp_path / "iris.csv", "sepal,petal,species", rows)
    status, err = ingest("iris.csv", "--labels", "virginica", "setosa", "versicolor")
    assert status == 0, err
    assert "labels of column 'species' → classes: virginica = 0, setosa = 1, versicolor = 2" \
        in err
    assert "sent 30 rows of iris.csv in 1 chunks" in err


@pytest.mark.slow
def test_list_delete_predict_version_and_help(
    embedded_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--url", embedded_server.url)
    x, y = regression_data(30, seed=14)
    with Client(embedded_server.url) as api:
        older = api.create_comparison({**comparison_body("exact"), "name": "older"})["id"]
        api.ingest(older, x, y, wait=True)
        single = {**comparison_body("exact"), "name": "single-model",
                  "models": comparison_body()["models"][:1]}
        newer = api.create_comparison(single)["id"]
        expected = api.predict(older, np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, -1.0, 2.0]]))

    status, out, _ = run_cli(capsys, "--version")
    assert (status, out) == (0, "modelcompare 0.1.0\n")
    status, out, err = run_cli(capsys, "list", "--log-level", "warning", *url)
    assert status == 0, err
    listed = [line for line in out.splitlines() if line.split()[0] in (older, newer)]
    assert listed[0].startswith(f"{newer}  single-model · 1 model · exact · 0 chunks applied")
    assert listed[1].startswith(f"{older}  older · 3 models · exact · 1 chunks applied")
    assert out.endswith("\n")  # newest first, above

    status, out, err = run_cli(capsys, "families", *url)
    assert (status, err) == (0, "")
    assert out.splitlines()[0] == ("beta_bernoulli  modelcompare 0.1.0  Beta–Bernoulli: y_r ~ "
                                   "Bernoulli(p) i.i.d., p ~ Beta(α, β); no inputs.")
    assert len(out.splitlines()) == 7

    status, out, err = run_cli(capsys, "predict", older, "--x", "0.1,0.2,0.3,0.4", "--x",
                            "1,0,-1,2", *url)
    assert status == 0, err
    lines = out.split("\n")
    assert lines[0] == ("row,mean,variance,right:mean,right:variance,too_few:mean,"
                        "too_few:variance,wrong_noise:mean,wrong_noise:variance")
    assert out.endswith("\n") and len(lines) == 4
    for row, line in enumerate(lines[1:3]):
        values = [float(v) for v in line.split(",")]
        assert values[0] == row
        assert values[1] == pytest.approx(expected["mixture"]["mean"][row], rel=1e-9)
        assert values[2] == pytest.approx(expected["mixture"]["variance"][row], rel=1e-9)
    _csv(tmp_path / "query.csv", "a,b,c,d", [[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, -1.0, 2.0]])
    status, from_file, err = run_cli(capsys, "predict", older, str(tmp_path / "query.csv"),
                                  "--x-cols", "a", "b", "c", "d", *url)
    assert status == 0 and from_file == out, err

    status, out, err = run_cli(capsys, "watch", newer, "--count", "1", *url)
    assert status == 0, err
    (row,) = [line for line in out.splitlines() if "right" in line]
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:4] == ["right", "—", "—", "—"]  # no data yet: log Z "—", not 0.00 ± 0.00
    status, _, err = run_cli(capsys, "delete", newer, *url)
    assert (status, err) == (0, f"deleted comparison 'single-model' ({newer})\n")
    with Client(embedded_server.url) as api, pytest.raises(ModelCompareError) as gone:
        api.get_comparison(newer)
    assert gone.value.status == 404

    helps = {}
    for command in ("serve", "worker", "demo", "ingest"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        helps[command] = " ".join(capsys.readouterr().out.split())
    assert "--port PORT TCP port (env MODELCOMPARE_PORT; default 8000)" in helps["serve"]
    assert "folder of the embedded Redis (env MODELCOMPARE_DATA_DIR; default .modelcompare)" \
        in helps["serve"]
    assert "the Redis server (env REDIS_URL; required)" in helps["worker"]
    assert "--rows ROWS rows to stream (default 3000)" in helps["demo"]
    assert "--chunk-size CHUNK_SIZE rows per POST (default 500)" in helps["ingest"]
    with pytest.raises(SystemExit) as bad_level:
        main(["list", "--log-level", "loud"])
    assert bad_level.value.code == 2 and "invalid choice: 'loud'" in capsys.readouterr().err


def test_add_model_and_remove_model(embedded_server: Server, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A model added from a YAML spec replays the stored rows and joins with its exact log Z;
    one removed leaves the others' probabilities."""
    url = ("--url", embedded_server.url)
    x, y = regression_data(40, seed=15)
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        api.ingest(cid, x, y, wait=True)
    model = {"name": "last_two", "family": "linear_regression", "config": {"dim": 2},
             "columns": [2, 3]}
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(model))
    status, out, err = run_cli(capsys, "add-model", cid, str(tmp_path / "model.yaml"), *url)
    assert (status, out) == (0, ""), err
    assert err == f"added model 'last_two' to {cid}: it replays the 40 rows stored before it " \
        "joins\n"
    deadline = time.monotonic() + 60
    with Client(embedded_server.url) as api:
        while by_name(evidence := api.evidence(cid))["last_two"]["catching_up"]:
            assert time.monotonic() < deadline, "the added model did not catch up"
            time.sleep(0.1)
    exact = exact_log_evidence(model["config"], x, y, [2, 3])
    assert by_name(evidence)["last_two"]["log_evidence"] == pytest.approx(exact, abs=1e-8)

    status, out, err = run_cli(capsys, "remove-model", cid, "too_few", *url)
    assert (status, out) == (0, ""), err
    assert err == f"removed model 'too_few' from {cid}; left: right, wrong_noise, last_two\n"
    with Client(embedded_server.url) as api:
        probabilities = [m["posterior_probability"] for m in api.evidence(cid)["models"]]
    assert len(probabilities) == 3 and sum(probabilities) == pytest.approx(1.0)


def test_an_elbo_over_fewer_rows_says_so(embedded_server: Server,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The ELBO is refreshed when a model's rows double: after 40 + 20 rows it covers 40."""
    monkeypatch.setenv("COLUMNS", "160")  # the table on one line per model
    spec = {"name": "normal", "estimator": {"method": "exact"},
            "models": [{"name": "nig", "family": "linear_regression_unknown_noise",
                        "config": {"dim": 1}}]}
    x, y = regression_data(60, seed=15)
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(spec)["id"]
        api.ingest(cid, x[:40, :1], y[:40], wait=True)
        evidence = api.ingest(cid, x[40:, :1], y[40:], wait=True)
    (model,) = evidence["models"]
    assert (model["elbo_n_observations"], model["n_observations"]) == (40, 60)
    status, out, err = run_cli(capsys, "watch", cid, "--count", "1", "--url", embedded_server.url)
    assert status == 0, err
    assert f"{model['elbo']:.2f} (of 40 rows)" in out
    caption = '"(of k rows)" marks one that covers fewer rows than log Z: compare it with log Z'
    assert caption in " ".join(out.split())


def test_a_demo_in_a_folder_a_server_holds_refuses(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    held = EmbeddedRedis(tmp_path)  # what a running server holds
    try:
        with pytest.raises(DataFolderInUse):
            EmbeddedRedis(tmp_path)  # the same folder, in this process too
        status, _, err = run_cli(capsys, "demo", "--data-dir", str(tmp_path), "--rows", "10")
    finally:
        held.close()
    assert status == 1
    assert err.startswith(f"modelcompare: error: another modelcompare server (pid {os.getpid()})"
                          f" is using the data folder {tmp_path.resolve()}, and its embedded "
                          "Redis cannot be shared.")
    EmbeddedRedis(tmp_path).close()  # free again once closed


def test_an_unreliable_model_says_so_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose moves diverged (service/reliability.py): "unreliable" in its state, and
    the reason under the table; the reliable one shows neither."""
    reason = "2 update(s) undid more than 10% of their SGHMC trajectories as diverged"
    models = [{"name": name, "log_evidence": -10.0, "log_evidence_stderr": 0.5,
               "n_observations": 40, "posterior_probability": 0.5, "ess": 60.0,
               "reliability": {"reliable": name == "calm", "reason": None if name == "calm"
                               else reason}} for name in ("calm", "wild")]
    evidence = {"n_observations": 40, "sequence": 1, "version": 2, "status": "ok",
                "models": models}
    console = Console(record=True, width=160)
    console.print(evidence_table(evidence))
    lines = console.export_text().splitlines()
    calm, wild = (next(line for line in lines if f" {name} " in line) for name in ("calm", "wild"))
    assert calm.split("│")[-2].strip() == "current"
    assert wild.split("│")[-2].strip() == "current, unreliable"
    assert f"wild unreliable: {reason}" in " ".join(" ".join(lines).split())
