"""Estimator states to bytes and back, bit-exact and without pickle (safetensors format)."""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

import torch
from safetensors.torch import load, save

StateT = TypeVar("StateT", bound=NamedTuple)


def state_to_bytes(state: Any) -> bytes:
    """Serialise a NamedTuple whose fields are all tensors."""
    tensors = {name: value.detach().contiguous().cpu() for name, value in state._asdict().items()}
    return save(tensors, metadata={"type": type(state).__name__})


def state_from_bytes(state_type: type[StateT], data: bytes) -> StateT:
    tensors = load(data)
    # safetensors stores its metadata in the header; check the record type by field names.
    fields = set(state_type._fields)
    if set(tensors) != fields:
        raise ValueError(
            f"stored state has fields {sorted(tensors)}, expected {sorted(fields)} for "
            f"{state_type.__name__}"
        )
    return state_type(**{name: tensors[name] for name in state_type._fields})


def scalar(value: float | int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype)
