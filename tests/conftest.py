"""Shared test configuration: float64 defaults and a seeded generator."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
