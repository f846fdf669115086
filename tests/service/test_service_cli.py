"""The console script: ``serve`` (embedded Redis + worker), ``worker`` (killed with SIGKILL and
replaced: same final bits), ``demo`` (the right model wins)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from service_helpers import chunks, comparison_body, regression_data
from service_server import (
    LOCAL_REDIS,
    StartServer,
    create_and_ingest,
    drain,
    free_port,
    make_worker,
    states,
)

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
    total = 150
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
        [str(BIN / "modelcompare"), "demo", "--rows", "400", "--chunk", "200",
         "--particles", "32", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "120"},
    )
    assert result.returncode == 0, result.stderr
    # SG-AIS must pick a model with the true inputs (after 400 rows the useless-extra-input model
    # trails the right one by only ~2 nats, within estimator noise); the oracle must be exact.
    winner = result.stdout.split("Winner: ")[1].split()[0]
    assert winner in ("right_inputs", "extra_useless_input"), result.stdout
    assert "its winner is right_inputs" in result.stdout
