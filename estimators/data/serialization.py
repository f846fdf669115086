"""Estimator states to bytes and back, bit-exact and without pickle (safetensors format)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, TypeVar

import torch
from safetensors.torch import load, save
from torch import Tensor

StateT = TypeVar("StateT", bound=NamedTuple)


def state_to_tensors(state: Any, prefix: str = "") -> dict[str, Tensor]:
    """The fields of a NamedTuple of tensors, keyed ``prefix + field``."""
    return {
        prefix + name: value.detach().contiguous().cpu() for name, value in state._asdict().items()
    }


def state_from_tensors(
    state_type: type[StateT],
    tensors: dict[str, Tensor],
    prefix: str = "",
    device: torch.device | str = "cpu",
) -> StateT:
    names = {key[len(prefix) :] for key in tensors if key.startswith(prefix)}
    if names != set(state_type._fields):
        raise ValueError(
            f"stored state has fields {sorted(names)}, expected {sorted(state_type._fields)} "
            f"for {state_type.__name__}"
        )
    return state_type(**{name: tensors[prefix + name].to(device) for name in state_type._fields})


def state_to_bytes(state: Any) -> bytes:
    return save(state_to_tensors(state), metadata={"type": type(state).__name__})


def state_from_bytes(
    state_type: type[StateT], data: bytes, device: torch.device | str = "cpu"
) -> StateT:
    return state_from_tensors(state_type, load(data), device=device)


def read_safetensors(data: bytes) -> tuple[dict[str, str], dict[str, Tensor]]:
    """Metadata and tensors of safetensors bytes; ``ValueError`` when they are not that."""
    try:
        tensors = load(data)
        header_size = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_size]).get("__metadata__", {})
    except Exception as exc:  # safetensors raises its own error types for malformed input
        raise ValueError(f"not safetensors data: {exc}") from None
    return metadata, tensors
