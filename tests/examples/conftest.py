"""Fixtures of the example plugin's tests: the plugin installed once per test process, put on
this process's path on demand, and headless Chromium for the dashboard."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from example_plugin import MODULE, install
from playwright.sync_api import Browser

from modelcompare.models.registry import families

TESTS = Path(__file__).resolve().parents[1]

# The service's process helpers (tests/faults/fault_processes.py, tests/service/*), imported by
# bare name as their own folders' tests do; appended, so that nothing of theirs shadows a module.
for helpers in (TESTS / "faults", TESTS / "service"):
    if str(helpers) not in sys.path:
        sys.path.append(str(helpers))

from browser import chromium  # noqa: E402  (tests/service, just put on the path)


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed by pip into a folder of its own (once per test process, xdist
    workers each their own): put it on PYTHONPATH to give a process the plugin."""
    return install(tmp_path_factory.mktemp("example-plugin"))


@pytest.fixture
def plugin_imported(plugin_site: Path) -> Iterator[Path]:
    """The plugin installed in this process for the test: its site folder on ``sys.path`` and
    the family registry reloaded; both restored after."""
    sys.path.insert(0, str(plugin_site))
    importlib.invalidate_caches()
    families.cache_clear()
    yield plugin_site
    sys.path.remove(str(plugin_site))
    for name in [n for n in sys.modules if n == MODULE or n.startswith(f"{MODULE}.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    families.cache_clear()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched
