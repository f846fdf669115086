"""Chunks of rows as compact binary blocks: a small header, then float64 x and y, little-endian."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np
import torch

from modelcompare.estimators import Rows

HEADER = struct.Struct("<IIB")  # rows, columns of x (0: no x), has y
_HEADER = HEADER


def encode_block(x: np.ndarray | None, y: np.ndarray | None) -> bytes:
    reference = x if x is not None else y
    if reference is None:
        raise ValueError("a block needs x or y")
    rows = int(reference.shape[0])
    columns = 0 if x is None else int(x.shape[1])
    parts: list[bytes | memoryview] = [_HEADER.pack(rows, columns, int(y is not None))]
    # joined from the arrays' own memory: one copy of the numbers, not two
    if x is not None:
        parts.append(memoryview(np.ascontiguousarray(x, dtype="<f8")).cast("B"))
    if y is not None:
        parts.append(memoryview(np.ascontiguousarray(y, dtype="<f8")).cast("B"))
    return b"".join(parts)


def empty_block(columns: int, has_y: bool) -> bytes:
    """A block of zero rows: keeps block index = sequence - 1 for a dead-lettered chunk."""
    return _HEADER.pack(0, columns, int(has_y))


def decode_block(data: bytes, keep: Sequence[int] | None = None) -> Rows:
    """The rows of a block; with ``keep``, only those columns of x (in that order), copied out
    of ``data`` without the others ever being."""
    rows, columns, has_y = _HEADER.unpack_from(data)
    offset = _HEADER.size
    x = y = None
    if columns:
        size = rows * columns * 8
        x = np.frombuffer(data, dtype="<f8", count=rows * columns, offset=offset)
        x = x.reshape(rows, columns)
        x = x.astype(np.float64) if keep is None else np.ascontiguousarray(
            x[:, np.asarray(keep, dtype=np.intp)], dtype=np.float64)
        x = torch.from_numpy(x)
        offset += size
    if has_y:
        y = torch.from_numpy(np.frombuffer(data, dtype="<f8", count=rows, offset=offset).copy())
    return Rows(x, y)


def block_digest(block: bytes) -> str:
    """What an idempotency key remembers of a request: the digest of its parsed rows."""
    return hashlib.sha256(block).hexdigest()
