"""Request and stored shapes. A model's config is validated by building the model; the estimator
settings by building the estimator for every model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from estimators import EstimatorConfigError, build_estimator
from models import Model, ModelConfigError, build_model

NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"


class EstimatorIn(BaseModel):
    """``method`` plus that method's settings, e.g. ``{"method": "sgais", "particles": 64}``."""

    model_config = ConfigDict(extra="allow")
    method: str = "sgais"

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    family: str
    config: dict[str, Any] = Field(default_factory=dict)
    columns: list[int] | None = None  # indices of x the model reads; default the first input_dim
    prior_probability: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @field_validator("config")
    @classmethod
    def _columns_beside(cls, config: dict[str, Any]) -> dict[str, Any]:
        if "columns" in config:
            raise ValueError('"columns" goes beside "config", not inside it: {"name": …, '
                             '"family": …, "config": {"dim": 2}, "columns": [0, 3]}')
        return config

    @field_validator("config")
    @classmethod
    def _representable(cls, config: dict[str, Any]) -> dict[str, Any]:
        """Scales outside ±[1e-100, 1e100] overflow float64 once squared or inverted."""
        for key, value in config.items():
            if isinstance(value, float) and value and not 1e-100 <= abs(value) <= 1e100:
                raise ValueError(f"config {key!r} = {value:g} is outside ±[1e-100, 1e100]")
        return config

    def build(self) -> Model:
        try:
            return build_model(self.family, **self.config)
        except ModelConfigError as exc:
            raise ValueError(f"model {self.name!r}: {exc}") from None

    def spec(self, prior_weight: float) -> ModelSpec:
        model = self.build()
        check_size(self.name, model.param_dim, 1)  # before anything is sized by the model
        columns = list(range(model.input_dim)) if self.columns is None else self.columns
        if len(columns) != model.input_dim or any(c < 0 for c in columns):
            raise ValueError(
                f"model {self.name!r} reads {model.input_dim} columns of x, got columns {columns}"
            )
        return ModelSpec(
            name=self.name,
            family=self.family,
            config=model.config(),
            columns=columns,
            prior_weight=prior_weight,
        )


class ComparisonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    seed: int = 0
    models: list[ModelIn] = Field(min_length=1)
    estimator: EstimatorIn = Field(default_factory=EstimatorIn)
    x_dim: int | None = Field(default=None, ge=0)  # columns of x per row; default: what models read

    @model_validator(mode="after")
    def _names_unique(self) -> ComparisonIn:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        return self


class ModelSpec(BaseModel):
    """A model as stored: the full config, the columns it reads, its unnormalised prior weight."""

    name: str
    family: str
    config: dict[str, Any]
    columns: list[int]
    prior_weight: float

    def build(self) -> Model:
        return build_model(self.family, **self.config)


class ComparisonSpec(BaseModel):
    id: str
    name: str
    seed: int
    created_at: float
    x_dim: int
    has_y: bool
    estimator: dict[str, Any]  # method and settings
    models: list[ModelSpec]

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def check_model(self, spec: ModelSpec) -> None:
        """``ValueError`` unless ``spec`` can read this comparison's rows with its estimator."""
        model = spec.build()
        if spec.columns and max(spec.columns) >= self.x_dim:
            raise ValueError(
                f"model {spec.name!r} reads columns {spec.columns} but rows have {self.x_dim}"
            )
        if model.has_target and not self.has_y:
            raise ValueError(f"model {spec.name!r} needs y but this comparison's rows have none")
        settings = {k: v for k, v in self.estimator.items() if k != "method"}
        try:
            estimator = build_estimator(self.estimator["method"], model, **settings)
        except EstimatorConfigError as exc:
            raise ValueError(f"estimator for model {spec.name!r}: {exc}") from None
        except ArithmeticError as exc:  # e.g. prior_std=1e300: prior_std**2 overflows
            raise ValueError(f"model {spec.name!r}: its config overflows float64 ({exc})") from None
        config = getattr(estimator, "config", None)
        particles = max(getattr(config, "particles", 1), getattr(config, "live_points", 1))
        check_size(spec.name, model.param_dim, particles)


# Service limits, checked before any state is allocated: a request must not be able to make the
# API or a worker allocate gigabytes (exact states hold D×D matrices; particle states M×D).
MAX_PARAMETERS = 2_000
MAX_STATE_VALUES = 10_000_000  # particles × parameters: 80 MB of float64


def check_size(name: str, parameters: int, particles: int) -> None:
    if parameters > MAX_PARAMETERS:
        raise ValueError(f"model {name!r} has {parameters} parameters; the service allows "
                         f"{MAX_PARAMETERS}")
    if parameters * particles > MAX_STATE_VALUES:
        raise ValueError(f"model {name!r}: {particles} particles × {parameters} parameters "
                         f"exceed the service limit of {MAX_STATE_VALUES} values")


def prior_weights(models: list[ModelIn], existing: list[float]) -> list[float]:
    """Given probabilities as they are; the rest share what is left equally (uniform default).

    For a model added later without one, the mean of the existing weights (an equal share).
    """
    if existing:
        mean = sum(existing) / len(existing)
        return [m.prior_probability or mean for m in models]
    given = sum(m.prior_probability or 0.0 for m in models)
    missing = sum(m.prior_probability is None for m in models)
    if missing and given >= 1.0:
        raise ValueError("prior probabilities leave nothing for the models without one")
    share = (1.0 - given) / missing if missing else 0.0
    return [m.prior_probability or share for m in models]


def comparison_spec(request: ComparisonIn, cid: str, created_at: float) -> ComparisonSpec:
    """Validate a create request into the stored spec (``ValueError`` with a readable message)."""
    weights = prior_weights(request.models, [])
    models = [m.spec(w) for m, w in zip(request.models, weights, strict=True)]
    needed = max((max(m.columns) + 1 for m in models if m.columns), default=0)
    x_dim = needed if request.x_dim is None else request.x_dim
    spec = ComparisonSpec(
        id=cid,
        name=request.name,
        seed=request.seed,
        created_at=created_at,
        x_dim=x_dim,
        has_y=any(m.build().has_target for m in models),
        estimator={"method": request.estimator.method, **request.estimator.settings},
        models=models,
    )
    for model in models:
        spec.check_model(model)
    return spec


class ChunkIn(BaseModel):
    """Rows of data: ``x`` (rows × columns) and ``y``; ``x`` is left out when no model reads it."""

    x: list[list[float]] | None = None
    y: list[float] | None = None


class PredictIn(BaseModel):
    """Query rows; left out when no model reads x (one predictive row)."""

    x: list[list[float]] | None = None
