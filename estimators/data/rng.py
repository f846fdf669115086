"""Explicit randomness: generators derived from stable names, never from global state."""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends only on ``parts`` (e.g. comparison seed, model, sequence)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def derive_generator(*parts: object, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on ``device`` seeded from ``parts`` (a CUDA generator draws other numbers
    than a CPU one from the same seed: states are reproducible per device)."""
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))
