"""A service made of real processes (redis-server with AOF, the API, workers) to kill. Every
test in this folder is marked ``e2e`` (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_processes import Deployment


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    started = Deployment(tmp_path, workers=2, lease_ttl=1.0, poll_interval=0.05,
                         batch_chunks=4, wait_timeout=30)
    started.start()
    yield started
    started.stop()
