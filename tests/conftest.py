"""Shared test configuration: float64 defaults, a seeded generator and benchmark scripts."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

TESTS = Path(__file__).resolve().parent
BENCHMARKS = TESTS.parent / "benchmarks"
FAULTS = TESTS / "faults"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/faults/ is ``e2e``: it starts processes of its own."""
    for item in items:
        if item.path.is_relative_to(FAULTS):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def one_intra_op_thread() -> Iterator[None]:
    """Run each test on one torch thread, then restore the setting.

    The tensors of the tests are tiny (tens of particles, small chunks), as in a service worker,
    which runs on one thread unless told otherwise; with torch's default of one intra-op thread
    per core, every small op pays a thread hand-off, and on a busy 2-core machine that measured
    ~100× slower (4 Beta–Bernoulli runs: 0.14 s on one thread, 15 s on two, load average 5.6).
    Under ``-n 2`` the two test processes would also compete for both cores with their threads.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def benchmark_module() -> Callable[[str], ModuleType]:
    """Imports a script of benchmarks/ by name (e.g. ``"calibration"``)."""

    def load(name: str) -> ModuleType:
        # appended, not prepended: a script's name must not shadow a module the tests import
        sys.path.append(str(BENCHMARKS))
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))

    return load
