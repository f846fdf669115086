"""Shared test configuration: float64 defaults, a seeded generator and benchmark scripts."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def benchmark_module() -> Callable[[str], ModuleType]:
    """Imports a script of benchmarks/ by name (e.g. ``"calibration"``)."""

    def load(name: str) -> ModuleType:
        # appended, not prepended: benchmarks/service.py must not shadow the service package
        sys.path.append(str(BENCHMARKS))
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))

    return load
