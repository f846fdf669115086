"""Seeds derived from names: stable, distinct, 63-bit, independent of global RNG state."""

from __future__ import annotations

import torch

from modelcompare.estimators.data.rng import derive_generator, derive_seed


def test_derive_seed_is_stable_and_distinct() -> None:
    assert derive_seed(0, "model", 3) == derive_seed(0, "model", 3)
    seeds = {derive_seed(s, name, k) for s in range(3) for name in ("a", "b") for k in range(5)}
    assert len(seeds) == 30
    assert all(0 <= s < 2**63 for s in seeds)
    # Parts are joined with a separator, so ("a1", 2) and ("a", 12) differ.
    assert derive_seed("a1", 2) != derive_seed("a", 12)


def test_known_value() -> None:
    # Pinned: a change here silently breaks replay of every stored comparison.
    assert derive_seed(0, "linear_regression", "init") == 4331653061847326544
    assert isinstance(derive_seed(1), int)


def test_derive_generator_ignores_global_state() -> None:
    torch.manual_seed(1)
    a = torch.rand(5, generator=derive_generator(7, "x"), dtype=torch.float64)
    torch.manual_seed(2)
    torch.rand(100)
    b = torch.rand(5, generator=derive_generator(7, "x"), dtype=torch.float64)
    assert torch.equal(a, b)
