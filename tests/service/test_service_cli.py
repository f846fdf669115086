"""The console script: ``serve`` (embedded Redis + worker), ``worker`` (killed with SIGKILL and
replaced: same final bits), ``demo`` (the right model wins), and the client commands ``create``,
``ingest`` (CSV and Parquet, exact numbers, idempotent reruns), ``watch``, with one-line errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet
import pytest
import yaml
from service_helpers import by_name, chunks, comparison_body, exact_log_evidence, regression_data
from service_server import (
    LOCAL_REDIS,
    RunningServer,
    Server,
    StartServer,
    create_and_ingest,
    drain,
    free_port,
    make_worker,
    states,
)

from service.cli import main
from service.client import Client
from service.core.config import Settings
from service.store.keys import GROUP, Keys

BIN = Path(sys.executable).parent


def test_serve_runs_everything_with_an_embedded_redis(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MODELCOMPARE_REDIS_URL")}
    process = subprocess.Popen([str(BIN / "modelcompare"), "serve", "--port", str(port)],
                               cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        x, y = regression_data(30)
        with httpx.Client(base_url=url, timeout=60) as client:
            cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
            body = chunks(x, y, 30)[0]
            done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=body)
        assert done.status_code == 200 and done.json()["n_observations"] == 30
    finally:
        process.terminate()
        # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert (tmp_path / ".modelcompare" / "redis.db").is_file()  # saved at shutdown


def _worker(prefix: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": LOCAL_REDIS, "MODELCOMPARE_KEY_PREFIX": prefix,
           "MODELCOMPARE_LEASE_TTL": "0.5", "MODELCOMPARE_POLL_INTERVAL": "0.05",
           "MODELCOMPARE_BATCH_CHUNKS": "1"}
    return subprocess.Popen([str(BIN / "modelcompare"), "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigkilled_worker_is_replaced_and_the_bits_match(start_server: StartServer) -> None:
    """A real ``modelcompare worker`` process is SIGKILLed mid-stream; a second one takes over.
    (The exact estimator keeps this fast; RNG-driven SG-AIS recovery is in test_service_worker.)
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


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server on an embedded Redis for the client commands (starting one takes seconds)."""
    running = RunningServer(Settings(redis_url=None, poll_interval=0.1, wait_timeout=180.0,
                                     data_dir=tmp_path_factory.mktemp("embedded")))
    yield running.handle
    running.stop()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``modelcompare argv`` in this process: exit status, stdout, stderr."""
    try:
        main(list(argv))
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


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


def test_create_ingest_and_watch(tmp_path: Path, embedded_server: Server,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = embedded_server
    url = ("--url", server.url)
    body = comparison_body("exact")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(body))
    status, out, err = _run(capsys, "create", str(spec), *url)
    assert status == 0, err
    cid = out.strip()
    assert "created comparison regression with 3 models" in err

    csv, parquet, x, y = _write_data(tmp_path, 90)
    columns = ("--x-cols", "a", "b", "c", "d", "--y-col", "target")
    status, _, err = _run(capsys, "ingest", str(csv), "--comparison", cid, *columns,
                          "--chunk-size", "20", *url)
    assert status == 0, err
    assert "sent 45 rows of first.csv in 3 chunks" in err
    status, _, err = _run(capsys, "ingest", str(csv), "--comparison", cid, *columns,
                          "--chunk-size", "20", *url)
    assert status == 0 and "(3 were already ingested: skipped)" in err  # a rerun adds nothing
    status, _, err = _run(capsys, "ingest", str(parquet), "--comparison", cid, "--x-cols",
                          "a,b,c,d", "--y-col", "target", "--chunk-size", "45", *url)
    assert status == 0, err

    with Client(server.url) as api:
        evidence = api.evidence(cid)
    assert evidence["n_observations"] == 90 and evidence["sequence"] == 4
    for model in body["models"]:
        exact = exact_log_evidence(model["config"], x, y, list(range(model["config"]["dim"])))
        assert by_name(evidence)[model["name"]]["log_evidence"] == pytest.approx(exact, abs=1e-8)

    status, out, err = _run(capsys, "watch", cid, "--count", "1", *url)
    assert status == 0, err
    assert "90 rows, 4 chunks, version 4, status ok" in out
    best = max(evidence["models"], key=lambda m: m["posterior_probability"])
    assert f"{best['posterior_probability']:.4f}" in out and best["name"] in out


def test_watch_follows_updates(embedded_server: Server,
                               capsys: pytest.CaptureFixture[str]) -> None:
    server = embedded_server
    x, y = regression_data(20, seed=2)
    with Client(server.url) as api:
        cid = api.create_comparison(comparison_body("exact"))["id"]
        result: list[tuple[int, str, str]] = []
        watcher = threading.Thread(target=lambda: result.append(
            _run(capsys, "watch", cid, "--count", "2", "--url", server.url)))
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
         "column 'site' of first.csv is not numeric"),
        (["ingest", "{tmp}/holes.csv", "--comparison", "{cid}", "--y-col", "y"],
         "column 'y' of holes.csv has 1 missing or non-finite values (first at data row 2)"),
        (["ingest", "{tmp}/first.csv", "--comparison", "nope", "--x-cols", "a", "b", "c", "d",
          "--y-col", "target"], "the server refused: not_found: no comparison with id 'nope'"),
        (["ingest", "{tmp}/first.csv", "--comparison", "{cid}", "--x-cols", "a",
          "--y-col", "target"], "the server refused: invalid_chunk: rows of x need 4 numbers"),
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
    fill = {"tmp": str(tmp_path), "cid": cid}
    argv = [a.format(**fill) for a in argv]
    if "--url" not in argv:
        argv += ["--url", server.url]
    status, _, err = _run(capsys, *argv)
    assert status == 1
    last = err.rstrip("\n").split("\n")[-1]  # after the progress bar, if it had started
    assert last.startswith("modelcompare: error: ") and message.format(**fill) in last, err
    assert "Traceback" not in err
