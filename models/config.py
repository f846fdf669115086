"""Typed configuration records: one per family, the single source of a family's settings.

A model's constructor validates its arguments with its record (``FamilyConfig.checked``), and the
service publishes the same record as the JSON schema of that family's ``config`` (types, defaults,
bounds, descriptions), so what the API documents is what the model accepts.

The upper bounds keep one model within reach of a small machine (2 cores, 24 GB); a comparison
adds its own limits on parameters × particles (service/schemas.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from modelcompare.models.base import ModelConfigError

MAX_INPUT_DIM = 1_000
MAX_CLASSES = 100
# The Gaussian mixture enumerates all K! relabelings of its components (Model.relabelings): 720
# at K = 6; at K = 8 (40,320) one such tensor took 1.7 GB.
MAX_COMPONENTS = 6
# Scales (standard deviations, shapes, rates) are squared or inverted in the densities: beyond
# ±[1e-100, 1e100] that overflows float64.
MIN_SCALE = 1e-100
MAX_SCALE = 1e100


def integral(value: Any) -> Any:
    """JSON has one kind of number: 3.0 is the integer 3 (as in JSON Schema), 3.5 is not one."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer as JSON means it: 3 or 3.0, never "3" or true (with ``strict=True``). Bounds go in
# a ``Field`` default, or before the validator: Annotated[int, Field(ge=0), BeforeValidator(…)]
# (after it, or on ``Integer | None``, pydantic documents them as unknown keywords).
Integer = Annotated[int, BeforeValidator(integral)]


class FamilyConfig(BaseModel):
    """Settings of one family: strict types (no ``"3"`` or ``true`` for a number, integers as
    ``Integer``), no unknown keys, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @classmethod
    def checked(cls, **values: Any) -> Self:
        """The record, or ``ModelConfigError`` with every problem on one line."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(cls._problem(e) for e in exc.errors())
            raise ModelConfigError(f"{cls.__name__}: {problems}") from None

    @classmethod
    def _problem(cls, error: ErrorDetails) -> str:
        if error["type"] == "extra_forbidden":
            return unknown_key(str(error["loc"][-1]), list(cls.model_fields))
        return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"


def unknown_key(key: str, valid: Sequence[str]) -> str:
    """The message for a key that a record (of ``valid`` fields) does not have, e.g. ``unknown key
    'noise_sd' (did you mean 'noise_std'? valid keys: dim, noise_std, prior_std)``; the API's
    422 says the same (service/api/errors.py)."""
    close = difflib.get_close_matches(key, valid, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r} ({guess}valid keys: {', '.join(valid)})"


def input_dim(minimum: int = 1) -> Any:
    """A required ``dim``: the number of columns of x the model reads."""
    return Field(ge=minimum, le=MAX_INPUT_DIM, description="columns of x the model reads")


def scale(default: float, description: str) -> Any:
    """A positive real setting (a standard deviation, shape or rate)."""
    return Field(default, ge=MIN_SCALE, le=MAX_SCALE, allow_inf_nan=False, description=description)
