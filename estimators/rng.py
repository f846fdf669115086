"""Explicit randomness: generators derived from stable names, never from global state."""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends only on ``parts`` (e.g. comparison seed, model, sequence)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def derive_generator(*parts: object) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))
