"""Request and stored shapes. Requests are strict JSON: a number is never a string or a boolean
(``Integer`` accepts 3.0 as 3, as JSON Schema does). A model's config is its family's record
(``modelcompare.models.config``); the estimator settings are the method's settings record (the API
schema is generated from those records), checked again by building the estimator for every model."""

from __future__ import annotations

import functools
import operator
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from modelcompare.estimators import METHODS, EstimatorConfigError, Settings, build
from modelcompare.models import FAMILIES, FamilyUnavailable, Model, build_model, families
from modelcompare.models.config import FamilyConfig, Integer, integral
from modelcompare.service.limits import Limits, check_size, state_bytes

# at least one character that is not a dot: "." and ".." are path segments a URL resolves away
# (DELETE …/models/.. would reach …/{id}, the comparison itself)
NAME_PATTERN = r"^[A-Za-z0-9_.\-]*[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$"
DEFAULT_METHOD = "sgais"
# A comparison's name is shown in tables, logs and the dashboard: any printable text, but no
# control or invisible formatting characters (NUL, bidirectional overrides such as U+202E that
# make a name read as another: Unicode's Cc and Cf, line and paragraph separators), no path
# separators, no white space at either end. One pattern, in the OpenAPI schema and checked here.
_REFUSED = ("\\x00-\\x1f\\x7f-\\x9f\\u00ad\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891"
            "\\u08e2\\u180e\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u206f"
            "\\ufeff\\ufff9-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U0001343f"
            "\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0001\\U000e0020-\\U000e007f"
            "/\\\\")
COMPARISON_NAME_PATTERN = f"^[^\\s{_REFUSED}](?:[^{_REFUSED}]*[^\\s{_REFUSED}])?$"
COMPARISON_NAME_RULE = ("1–200 printable characters: no control or formatting characters, no "
                        "'/' or '\\', no white space at either end")
# Larger magnitudes overflow float64 in the likelihoods (squares, x·θ summed over rows) and
# would turn a model's evidence into -inf: refused at the door instead of dead-lettered.
MAX_ABS_VALUE = 1e100
STRICT_JSON = ConfigDict(extra="forbid", strict=True)
NonNegative = Annotated[int, Field(ge=0), BeforeValidator(integral)]


def estimator_variant(method: str, settings: type[Settings]) -> type[Settings]:
    """The request shape of one method: its settings record plus ``method`` as the tag."""
    name = "".join(part.capitalize() for part in method.split("_")) + "Estimator"
    return create_model(
        name,
        __base__=settings,
        __doc__=settings.__doc__,
        method=(Literal[method], Field(method, description="the estimator method")),
    )


ESTIMATOR_VARIANTS = {name: estimator_variant(name, m.settings) for name, m in METHODS.items()}
# ``{"method": "sgais", "particles": 64}``: one schema per method, told apart by ``method``.
EstimatorIn = Annotated[
    functools.reduce(operator.or_, ESTIMATOR_VARIANTS.values()),
    Field(discriminator="method"),
]


def stored_estimator(estimator: Settings) -> dict[str, Any]:
    """The method and the settings a request gave (defaults stay implicit, as they were sent)."""
    return {**estimator.model_dump(exclude_unset=True), "method": estimator.method}


class BaseModelIn(BaseModel):
    """A model of a comparison: ``family`` picks the shape of ``config`` (one variant per family
    of ``modelcompare.models.FAMILIES``, below)."""

    model_config = STRICT_JSON
    name: str = Field(pattern=NAME_PATTERN, max_length=64,
                      description="unique within the comparison; letters, digits, _ . - (not "
                      "dots alone)")
    family: str
    config: FamilyConfig
    columns: list[NonNegative] | None = Field(
        default=None,
        description="indices of the columns of x this model reads, one per config.dim; "
        "default: the first dim columns",
    )
    prior_probability: float | None = Field(
        default=None, gt=0, le=1, allow_inf_nan=False,
        description="prior model probability; models without one share what is left equally",
    )

    @model_validator(mode="before")
    @classmethod
    def _columns_beside_config(cls, data: Any) -> Any:
        config = data.get("config") if isinstance(data, dict) else None
        if isinstance(config, dict) and "columns" in config:
            raise ValueError('"columns" goes beside "config", not inside it: {"name": …, '
                             '"family": …, "config": {…}, "columns": [0, 2]}')
        return data

    def build(self) -> Model:
        return build_model(self.family, **self.config.model_dump())

    def spec(self, prior_weight: float) -> ModelSpec:
        model = self.build()
        check_size(self.name, model.param_dim, 1)  # before anything is sized by the model
        columns = list(range(model.input_dim)) if self.columns is None else self.columns
        if len(columns) != model.input_dim:
            raise ValueError(
                f"model {self.name!r} reads {model.input_dim} columns of x, got columns {columns}"
            )
        family = families().get(self.family)
        target = model.target()
        return ModelSpec(
            name=self.name,
            family=self.family,
            package=family.package,
            version=family.version,
            config=model.config(),
            columns=columns,
            prior_weight=prior_weight,
            target=None if target is None else target.public(),
        )


def _family_model_in(family: str, cls: type[Model]) -> type[BaseModelIn]:
    """The request shape of one family: ``family`` fixed, ``config`` its record (``{}`` may be
    left out when every setting has a default)."""
    record = cls.Config
    optional = not any(field.is_required() for field in record.model_fields.values())
    config = Field(default_factory=record) if optional else Field()
    return create_model(
        f"{cls.__name__}In",
        __base__=BaseModelIn,
        __doc__=f"A {family} model; its settings go in ``config``.",
        family=(Literal[family], Field()),  # type: ignore[valid-type]
        config=(record, config),
    )


# Discriminated on ``family``: one variant per registered family, so a new family's record is in
# the API (and its OpenAPI schema) as soon as it is in modelcompare.models.FAMILIES.
ModelIn = Annotated[
    Union[tuple(_family_model_in(f, c) for f, c in FAMILIES.items())],  # type: ignore[valid-type]  # noqa: UP007
    Field(discriminator="family"),
]


class ComparisonIn(BaseModel):
    model_config = ConfigDict(**STRICT_JSON, json_schema_extra={"examples": [{
        "name": "housing", "seed": 0, "estimator": {"method": "sgais", "particles": 64},
        "models": [{"name": "small", "family": "linear_regression", "config": {"dim": 1}},
                   {"name": "large", "family": "linear_regression", "config": {"dim": 2}}],
    }]})
    name: str = Field(min_length=1, max_length=200, description=COMPARISON_NAME_RULE,
                      json_schema_extra={"pattern": COMPARISON_NAME_PATTERN})
    seed: Integer = Field(default=0, ge=0, le=2**64 - 1,
                          description="all randomness derives from it; 0 to 2⁶⁴ − 1")
    models: list[ModelIn] = Field(min_length=1, description="names unique")
    estimator: EstimatorIn = Field(default_factory=ESTIMATOR_VARIANTS[DEFAULT_METHOD])
    x_dim: NonNegative | None = Field(
        default=None,
        description="numbers per row of x; default: up to the last column a model reads")

    @field_validator("estimator", mode="before")
    @classmethod
    def _default_method(cls, estimator: Any) -> Any:
        if isinstance(estimator, dict) and "method" not in estimator:
            return {"method": DEFAULT_METHOD, **estimator}
        return estimator

    @field_validator("name")
    @classmethod
    def _printable_name(cls, name: str) -> str:
        if re.fullmatch(COMPARISON_NAME_PATTERN, name) is None:
            raise ValueError(f"the comparison name must be {COMPARISON_NAME_RULE}")
        return name

    @model_validator(mode="after")
    def _names_unique(self) -> ComparisonIn:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        return self


class ModelSpec(BaseModel):
    """A model as stored: its family with the package and version that provided it, the full
    config, the columns it reads, its unnormalised prior weight and the values its y may take
    (``Target.public``; None without a target). Records made before packages were recorded
    have None there, and the target only when the family has none."""

    name: str
    family: str
    package: str | None = None
    version: str | None = None
    config: dict[str, Any]
    columns: list[int]
    prior_weight: float
    target: dict[str, Any] | None = None

    def unavailable(self) -> str | None:
        """Why this process cannot build the model (a missing family, or a version that cannot
        continue it: ``Family.refuses``), or None."""
        known = families().known.get(self.family)
        if known is None:
            return f"model {self.name!r}: family {self.family!r} ({self.package or 'a plugin'}) " \
                   "is not installed here"
        why = known.refuses(self.package, self.version)
        return None if why is None else f"model {self.name!r}: {why}"

    def stored_target(self) -> dict[str, Any] | None:
        """``target``; for a record made before targets were stored (a built-in family), the
        built model's (None when this process cannot build it)."""
        if self.target is not None or self.package is not None or self.unavailable():
            return self.target
        built = self.build().target()
        return None if built is None else built.public()

    def build(self) -> Model:
        """The model; ``FamilyUnavailable`` when ``unavailable`` says why not."""
        why = self.unavailable()
        if why is not None:
            raise FamilyUnavailable(why)
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

    def unavailable(self) -> str | None:
        """Why this process cannot continue the comparison (``ModelSpec.unavailable`` of its
        first such model), or None."""
        return next(filter(None, (m.unavailable() for m in self.models)), None)

    def check_model(self, spec: ModelSpec) -> int:
        """``ValueError`` unless ``spec`` can read this comparison's rows with its estimator;
        else the bytes of its stored state."""
        model = spec.build()
        if spec.columns and max(spec.columns) >= self.x_dim:
            raise ValueError(
                f"model {spec.name!r} reads columns {spec.columns} but rows have {self.x_dim}"
            )
        if model.has_target and not self.has_y:
            raise ValueError(f"model {spec.name!r} needs y but this comparison's rows have none")
        settings = {k: v for k, v in self.estimator.items() if k != "method"}
        try:
            estimator = build(model, self.estimator["method"], **settings)
        except EstimatorConfigError as exc:
            raise ValueError(f"estimator for model {spec.name!r}: {exc}") from None
        except ArithmeticError as exc:  # e.g. prior_std=1e300: prior_std**2 overflows
            raise ValueError(f"model {spec.name!r}: its config overflows float64 ({exc})") from None
        check_size(spec.name, model.param_dim, max(estimator.particles, 1))
        return state_bytes(model.param_dim, estimator.particles, int(settings.get("islands", 1)))


def prior_weights(models: list[BaseModelIn], existing: list[float]) -> list[float]:
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


def comparison_spec(
    request: ComparisonIn, cid: str, created_at: float, limits: Limits
) -> ComparisonSpec:
    """Validate a create request into the stored spec (``ValueError`` with a readable message,
    ``LimitExceeded`` naming the limit)."""
    limits.check_shape(len(request.models), request.x_dim,
                       [c for m in request.models for c in m.columns or []])
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
        estimator=stored_estimator(request.estimator),
        models=models,
    )
    limits.check(spec)
    return spec


Value = Annotated[float, Field(ge=-MAX_ABS_VALUE, le=MAX_ABS_VALUE)]
# Rows of x: as many numbers as the comparison's x_dim (what the schema cannot say: it depends
# on the comparison, so a chunk of another width gets 422).
Rows = Annotated[list[Annotated[list[Value], Field(min_length=1)]], Field(min_length=1)]
# Query rows: the same, or ``[]`` per row when no model reads x.
QueryRows = Annotated[list[list[Value]], Field(min_length=1)]


class ChunkIn(BaseModel):
    """Rows of data: ``x`` (rows × x_dim) and ``y`` (one per row); ``x`` is left out when no
    model reads it, ``y`` when no model has a target."""

    model_config = STRICT_JSON
    x: Rows | None = None
    y: Annotated[list[Value], Field(min_length=1)] | None = None


class PredictIn(BaseModel):
    """Query rows of x_dim numbers; when no model reads x, ``[[]]`` per predictive row (one
    row when left out)."""

    model_config = STRICT_JSON
    x: QueryRows | None = None
