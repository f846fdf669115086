"""Fixtures of the API tests: ``serve``, the server as ``modelcompare serve`` runs it (its
uvicorn config and limits); for those that drive a browser, headless Chromium (Playwright),
installed with apt-get when missing, screenshots going to ARTIFACTS."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, sync_playwright
from service_server import LOCAL_REDIS, delete_prefix, free_port, local_redis_available

from modelcompare.service.api.http import server_config
from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start ``modelcompare serve``'s server (its uvicorn config) on 127.0.0.1:6379."""
    if not local_redis_available():
        pytest.skip("no Redis at 127.0.0.1:6379")
    running: list[tuple[uvicorn.Server, threading.Thread, str]] = []

    def start(**overrides: Any) -> tuple[str, int]:
        prefix = f"mctest-{uuid.uuid4().hex[:10]}"
        settings = Settings(redis_url=LOCAL_REDIS, key_prefix=prefix, port=free_port(),
                            embedded_worker=True, poll_interval=0.1, **overrides)
        server = uvicorn.Server(server_config(create_app(settings), settings, "warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        running.append((server, thread, prefix))
        return settings.host, settings.port

    yield start
    for server, thread, prefix in running:
        server.should_exit = True
        thread.join(timeout=30)
        delete_prefix(LOCAL_REDIS, prefix)


def _apt_install() -> str | None:
    """Install Debian's chromium; the error text when that is impossible."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if shutil.which("apt-get") is None or (sudo and shutil.which("sudo") is None):
        return "apt-get (as root or with sudo) is not available"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run([*sudo, *command], capture_output=True, text=True, env=env,
                              timeout=900, check=False)
        if done.returncode == 0 and CHROMIUM.exists():
            return None
    return f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists() and (problem := _apt_install()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chromium is needed for the dashboard tests: {problem}")
        pytest.skip(f"no chromium: {problem}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def artifacts() -> Path:
    """The folder for screenshots (test-artifacts/ at the repository root)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
