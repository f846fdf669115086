"""Estimator states to bytes and back, bit-exact and without pickle (safetensors format).

A state is a NamedTuple of tensors whose fields may themselves be NamedTuples of tensors (an
extension's slot beside the core state). Stored, it is flat: one tensor per leaf, keyed
``slot_field``, or by the name the slot's type declares in ``stored_keys`` (the keys of states
written before the slot existed, so that they load as they are).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch
from safetensors.torch import load, save
from torch import Tensor

StateT = TypeVar("StateT", bound=NamedTuple)


def is_record(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def stored_key(record_type: type, slot: str, name: str) -> str:
    return getattr(record_type, "stored_keys", {}).get(name, f"{slot}_{name}")


def leaves(state: Any) -> dict[str, Tensor]:
    """The state's tensors by stored key, in field order (sub-records flattened in place; a slot
    whose type sets ``written_when_empty = False`` is left out while it is ``empty``: it loads as
    its default)."""
    found: dict[str, Tensor] = {}
    for name, value in state._asdict().items():
        if is_record(value):
            if not getattr(value, "written_when_empty", True) and value.empty:
                continue
            found.update({stored_key(type(value), name, sub): leaf
                          for sub, leaf in value._asdict().items()})
        else:
            found[name] = value
    return found


def is_record_type(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")


def from_leaves(state_type: type[StateT], tensors: dict[str, Tensor]) -> StateT:
    """``state_type`` from its tensors by stored key; a field added to a type after the state was
    stored takes its default (``_field_defaults``), any other difference is an error."""
    hints = typing.get_type_hints(state_type)
    defaults: dict[str, Any] = state_type._field_defaults  # type: ignore[attr-defined]
    expected: set[str] = set()
    missing: list[str] = []

    def take(key: str, fallback: Tensor | None) -> Tensor | None:
        expected.add(key)
        if key not in tensors and fallback is None:
            missing.append(key)
        return tensors.get(key, fallback)

    fields: dict[str, Any] = {}
    for name in state_type._fields:
        kind = hints[name]
        if not is_record_type(kind):
            fields[name] = take(name, defaults.get(name))
            continue
        slot_default = defaults.get(name)
        fields[name] = kind(**{
            sub: take(stored_key(kind, name, sub),
                      kind._field_defaults.get(sub) if slot_default is None
                      else getattr(slot_default, sub))
            for sub in kind._fields
        })
    if missing or not set(tensors) <= expected:
        raise ValueError(
            f"stored state has fields {sorted(tensors)}, expected {sorted(expected)} "
            f"for {state_type.__name__}"
        )
    return state_type(**fields)


def map_leaves(fn: Callable[[Tensor], Tensor], state: StateT) -> StateT:
    """``state`` with ``fn`` applied to every tensor, sub-records kept as they are."""
    return zip_leaves(lambda leaves: fn(leaves[0]), [state])


def zip_leaves(fn: Callable[[list[Tensor]], Tensor], states: list[StateT]) -> StateT:
    """One state of ``states``' structure whose every tensor is ``fn`` of theirs at its place."""
    first = states[0]
    return type(first)(*(
        type(value)(*(fn([s[i][j] for s in states]) for j in range(len(value))))
        if is_record(value)
        else fn([s[i] for s in states])
        for i, value in enumerate(first)
    ))


def state_to_tensors(state: Any, prefix: str = "") -> dict[str, Tensor]:
    """The state's tensors keyed ``prefix`` + stored key."""
    return {prefix + key: value.detach().contiguous().cpu() for key, value in leaves(state).items()}


def state_from_tensors(
    state_type: type[StateT],
    tensors: dict[str, Tensor],
    prefix: str = "",
    device: torch.device | str = "cpu",
) -> StateT:
    found = {key[len(prefix):]: value for key, value in tensors.items() if key.startswith(prefix)}
    return map_leaves(lambda value: value.to(device), from_leaves(state_type, found))


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
