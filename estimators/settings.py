"""Estimator settings: one typed, frozen record per method, each setting with a default, a lower
and an upper bound and a one-line description. The records validate what the engine is given
(``modelcompare.estimators.build``) and, through ``modelcompare.service.schemas``, what the API
accepts, so the OpenAPI page lists every method's settings with their defaults and bounds.

The upper bounds keep one update of one chunk from holding a worker for long: each caps a setting
that multiplies the cost of an update at 4–16× its default (docs/reference/settings.md).
Several settings at their caps at once multiply; the per-update ``Deadline`` is what bounds
that.

Settings come in two tiers. An everyday setting is one a user may well change on day one; every
other field is ``Advanced[...]``, marked ``"x-advanced": true`` in the JSON schema (so in the
service's OpenAPI document) and listed after the everyday ones there; the settings reference reads
the same mark (``is_advanced``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonDict

from modelcompare.estimators.errors import EstimatorConfigError
from modelcompare.estimators.moves.hmc import HMCParams
from modelcompare.models.config import unknown_key

_MARK: JsonDict = {"x-advanced": True}
T = TypeVar("T")
# An advanced setting (``hmc_step: Advanced[float] = Field(...)``): best left at its default unless
# a measurement says otherwise. A setting without the mark is an everyday one.
Advanced = Annotated[T, Field(json_schema_extra=_MARK)]


def _marked(extra: object) -> bool:
    return isinstance(extra, dict) and _MARK.items() <= extra.items()


def is_advanced(field: FieldInfo) -> bool:
    return _marked(field.json_schema_extra)


def _everyday_first(schema: JsonDict) -> None:
    # Pydantic orders fields by their first declaration along the bases, which the groups of
    # settings fix; the schema lists the everyday ones first, each tier in that order.
    properties = schema["properties"]
    assert isinstance(properties, dict)
    schema["properties"] = dict(sorted(properties.items(), key=lambda item: _marked(item[1])))


class Settings(BaseModel):
    """The base of every method's settings: strict types, no unknown keys, immutable."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", strict=True, json_schema_extra=_everyday_first
    )

    device: str = Field(
        "cpu",
        description="torch device of the state and the arithmetic (float64): 'cpu' or 'cuda[:k]'",
        pattern=r"^(cpu|cuda(:\d{1,2})?)$",
    )

    @model_validator(mode="before")
    @classmethod
    def _known_settings_only(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                known = sorted(cls.model_fields)
                raise ValueError("; ".join(unknown_key(str(key), known) for key in unknown))
        return data

    @field_validator("device")
    @classmethod
    def _device_available(cls, device: str) -> str:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} is not available on this machine (no CUDA)")
        return device

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> Self:
        """The record for ``values``, or ``EstimatorConfigError`` naming what is wrong."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise EstimatorConfigError(readable(exc)) from None

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)


def readable(exc: ValidationError) -> str:
    """One line per problem, ``setting: what is wrong``."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


# --- groups of settings that several methods share -----------------------------------------


class ParticleSettings(Settings):
    particles: int = Field(64, ge=2, le=1024, description="number of particles M")


class HMCSettings(Settings):
    hmc_step: Advanced[float] = Field(
        0.16,
        gt=0.0,
        le=2.0,
        description="leapfrog step of the exact HMC moves, in units of the particle spread (±50%)",
    )
    leapfrog_steps: Advanced[int] = Field(
        10, ge=1, le=100, description="leapfrog steps of each exact HMC move"
    )
    hmc_moves: Advanced[int] = Field(
        8,
        ge=1,
        le=64,
        description="exact HMC transitions (fresh momentum each) per annealing step; left "
        "unset, × √(D / 44) for SGHMC methods with a model of D > 44 parameters",
    )

    @property
    def hmc(self) -> HMCParams:
        return HMCParams(self.hmc_step, self.leapfrog_steps, self.hmc_moves)


class LadderSettings(Settings):
    ess_target: Advanced[float] = Field(
        0.8,
        gt=0.0,
        le=0.99,
        description="conditional-ESS fraction each annealing step keeps (bisection on Δ); left "
        "unset, its χ² = 1/ESS − 1 × 44 / D for SGHMC methods with a model of D > 44 parameters",
    )
    resample_threshold: Advanced[float] = Field(
        0.5, ge=0.0, le=1.0, description="resample when ESS / M falls below this"
    )
