"""Fixtures of the API tests: ``serve``, the server as ``modelcompare serve`` runs it (its
uvicorn config and limits); for those that drive a browser, headless Chromium (Playwright),
installed with apt-get when missing, screenshots going to ARTIFACTS."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium
from playwright.sync_api import Browser
from service_server import (
    LOCAL_REDIS,
    PromptServer,
    delete_prefix,
    free_port,
    local_redis_available,
)

from modelcompare.service.api.http import server_config
from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start ``modelcompare serve``'s server (its uvicorn config) on 127.0.0.1:6379."""
    if not local_redis_available():
        pytest.skip("no Redis at 127.0.0.1:6379")
    running: list[tuple[PromptServer, threading.Thread, str]] = []

    def start(**overrides: Any) -> tuple[str, int]:
        prefix = f"mctest-{uuid.uuid4().hex[:10]}"
        settings = Settings(redis_url=LOCAL_REDIS, key_prefix=prefix, port=free_port(),
                            embedded_worker=True, poll_interval=0.1, **overrides)
        server = PromptServer(server_config(create_app(settings), settings, "warning"))
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def artifacts() -> Path:
    """The folder for screenshots (test-artifacts/ at the repository root)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
