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
    """A NamedTuple of tensors from ``tensors``; a field added to the type after the state was
    stored takes its default (``_field_defaults``), any other difference is an error."""
    names = {key[len(prefix) :] for key in tensors if key.startswith(prefix)}
    defaults: dict[str, Tensor] = state_type._field_defaults  # type: ignore[attr-defined]
    if not names <= set(state_type._fields) or not set(state_type._fields) - names <= set(defaults):
        raise ValueError(
            f"stored state has fields {sorted(names)}, expected {sorted(state_type._fields)} "
            f"for {state_type.__name__}"
        )
    found = {name: tensors[prefix + name] if name in names else defaults[name]
             for name in state_type._fields}
    return state_type(**{name: value.to(device) for name, value in found.items()})


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
