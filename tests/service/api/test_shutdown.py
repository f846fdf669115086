"""Bounded graceful shutdown: SIGTERM to a real ``modelcompare serve`` while its worker is busy,
requests wait with ``?wait=true`` and a websocket listens. It exits within
MODELCOMPARE_SHUTDOWN_TIMEOUT (plus the embedded Redis' shutdown), the waits answer 202
``processed: false``, the websocket closes with 1012, and every accepted chunk is still there
after a restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import websockets
from service_helpers import chunks, comparison_body, regression_data
from service_server import free_port

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
SHUTDOWN_TIMEOUT = 2.0
REDIS_SHUTDOWN = 3.0  # margin for the embedded Redis' own shutdown on a loaded machine
CHUNKS = 20


def start(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MODELCOMPARE_REDIS_URL")}
    env.update(
        MODELCOMPARE_SHUTDOWN_TIMEOUT=str(SHUTDOWN_TIMEOUT),
        MODELCOMPARE_WAIT_TIMEOUT="120",
        MODELCOMPARE_DATA_DIR=str(data_dir),
        MODELCOMPARE_TORCH_THREADS="1",
    )
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [str(BIN / "modelcompare"), "serve", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=sink,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return process
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()
        time.sleep(0.1)


def test_sigterm_mid_load_exits_within_the_bound(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    process = start(tmp_path / "data", port, log)
    try:
        x, y = regression_data(CHUNKS * 200)
        with httpx.Client(base_url=url, timeout=60) as client:
            body = comparison_body("sgais", particles=512)
            cid = client.post("/v1/comparisons", json=body).json()["id"]
            for chunk in chunks(x, y, 200):
                assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202

        waits: list[httpx.Response] = []

        def wait_for_one_more() -> None:
            with httpx.Client(base_url=url, timeout=120) as client:
                waits.append(
                    client.post(
                        f"/v1/comparisons/{cid}/chunks?wait=true", json=chunks(x, y, 200)[0]
                    )
                )

        waiters = [threading.Thread(target=wait_for_one_more) for _ in range(3)]
        close_codes: list[int | None] = []

        async def listen() -> None:
            async with websockets.connect(f"ws://127.0.0.1:{port}/v1/comparisons/{cid}/ws") as ws:
                try:
                    while True:
                        await ws.recv()
                except websockets.ConnectionClosed as closed:
                    close_codes.append(closed.rcvd.code if closed.rcvd else None)

        listener = threading.Thread(target=asyncio.run, args=(listen(),))
        for thread in (*waiters, listener):
            thread.start()
        time.sleep(1.0)  # the waits are in, the worker is mid-stream
        with httpx.Client(base_url=url) as client:
            assert client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] < CHUNKS
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
        elapsed = time.monotonic() - signalled
        print(f"exited {elapsed:.2f} s after SIGTERM (bound {SHUTDOWN_TIMEOUT} s + Redis)")
        for thread in (*waiters, listener):
            thread.join(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert elapsed < SHUTDOWN_TIMEOUT + REDIS_SHUTDOWN, (elapsed, log.read_text()[-3000:])
    assert code in (0, -signal.SIGTERM), log.read_text()[-3000:]
    assert [w.status_code for w in waits] == [202] * 3
    assert all(w.json()["processed"] is False for w in waits)
    assert close_codes == [1012]
    assert "Traceback" not in log.read_text()

    process = start(tmp_path / "data", port, log)  # same data: nothing accepted was lost
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            described = client.get(f"/v1/comparisons/{cid}").json()
        assert described["ingested"] == CHUNKS + 3
    finally:
        process.terminate()
        process.wait(timeout=30)
