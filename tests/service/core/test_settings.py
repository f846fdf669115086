"""Settings come from MODELCOMPARE_* variables; plain REDIS_URL is accepted too."""

from __future__ import annotations

import pytest

from modelcompare.service.cli.server import worker_threads
from modelcompare.service.core.config import Settings


def test_redis_url_is_read_from_either_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELCOMPARE_REDIS_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://example:6379/1")
    assert Settings().redis_url == "redis://example:6379/1"
    monkeypatch.setenv("MODELCOMPARE_REDIS_URL", "redis://other:6379/2")
    assert Settings().redis_url == "redis://other:6379/2"


def test_prefixed_variables_set_limits_and_worker_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("MODELCOMPARE_REDIS_URL", raising=False)
    monkeypatch.setenv("MODELCOMPARE_MAX_ROWS", "7")
    monkeypatch.setenv("MODELCOMPARE_WAIT_TIMEOUT", "2.5")
    settings = Settings()
    assert (settings.max_rows, settings.wait_timeout) == (7, 2.5)
    assert settings.redis_url is None and settings.runs_worker_inline  # embedded: inline worker
    assert not Settings(redis_url="redis://x:1/0").runs_worker_inline
    assert Settings(redis_url="redis://x:1/0", embedded_worker=True).runs_worker_inline
    with pytest.raises(ValueError, match="max_rows"):
        Settings(max_rows=0)


def test_a_worker_uses_one_torch_thread_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELCOMPARE_TORCH_THREADS", raising=False)
    assert worker_threads(Settings()) == 1
    monkeypatch.setenv("MODELCOMPARE_TORCH_THREADS", "3")
    assert worker_threads(Settings()) == 3
