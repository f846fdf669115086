"""Request shapes, and the stored ones they validate into (``modelcompare.service.records``,
re-exported here). Requests are strict JSON: a number is never a string or a boolean
(``Integer`` accepts 3.0 as 3, as JSON Schema does). A model's config is its family's record
(``modelcompare.models.config``); the estimator settings are the method's settings record (the API
schema is generated from those records), checked again by building the estimator for every model.
A model by formula (``modelcompare.service.formula``) reads named columns: its config's ``dim``
is its design width."""

from __future__ import annotations

import functools
import json
import operator
import re
import typing
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from modelcompare.estimators import METHODS, Settings
from modelcompare.models.config import Integer
from modelcompare.service.formula import joint_design
from modelcompare.service.limits import Limits
from modelcompare.service.model_request import (
    NAME_PATTERN,
    STRICT_JSON,
    BaseModelIn,
    ModelIn,
    NonNegative,
)
from modelcompare.service.records import MAX_ABS_VALUE, ComparisonSpec, ModelSpec
from modelcompare.service.rules import RuleIn, unknown_models

# Defined beside the model request and the stored records, imported from here as before
__all__ = ["MAX_ABS_VALUE", "NAME_PATTERN", "STRICT_JSON", "BaseModelIn", "ComparisonSpec",
           "ModelIn", "ModelSpec", "NonNegative"]

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


class Refused(NamedTuple):
    value: bool | str
    why: str


# Setting values the library and the benchmarks keep but the API refuses: the project's own
# measurements show each worse for users than the default, a larger error or an error bar that
# stops covering, for at most half the time (docs/guide/estimators.md#what-the-service-does-not-
# offer has the figures and the commands).
REFUSED: dict[str, Refused] = {
    "control_variates": Refused(
        False, "plain minibatch gradients bias log Z by tens of nats (−33.0 ± 1.1 over 14 "
        "softmax chunks at 256 particles)"),
    "increment_control": Refused(
        "none", "plain increments doubled the median error at 1e6 rows (1.35 against 0.66 nats, "
        "reported variance 0.98 against 0.40) to save 8% of the time"),
    "standard_error": Refused(
        "delta", "the delta-method stderr leaves out what resampling does and reads too small "
        "on drifting streams (coverage of ±2 stderr 93% and 90% against 100% and 97%)"),
    "preconditioner": Refused(
        "identity", "the identity mass biased softmax regression by −1.6 ± 0.5 nats over rows "
        "2,000..10,000 (±2 stderr covered 5 of 8 runs, against 8 of 8)"),
    "noise_friction": Refused(
        False, "without it the moves sample a law hotter than the posterior: −0.92 ± 0.15 nats "
        "over rows 2,000..10,000 of softmax regression, ±2 stderr covering 50% of the runs"),
}


def offered(field: FieldInfo, refused: Refused) -> Any:
    """A setting's type without the refused value: the values the API takes, as a Literal."""
    values = (True, False) if field.annotation is bool else typing.get_args(field.annotation)
    return Literal[tuple(v for v in values if v != refused.value)]


def refuse(cls: type, value: Any, info: ValidationInfo) -> Any:
    """Before the type check, so that a refused value is told why rather than what is allowed."""
    refused = REFUSED[str(info.field_name)]
    if type(value) is type(refused.value) and value == refused.value:
        raise ValueError(
            f"{json.dumps(value)} is offered by the library only (modelcompare.estimators."
            f"build, OnlineEvidence), for comparisons and benchmarks: {refused.why}; leave "
            f"{info.field_name} at its default (docs/guide/estimators.md)")
    return value


def estimator_variant(method: str, settings: type[Settings]) -> type[Settings]:
    """The request shape of one method: its settings record plus ``method`` as the tag, each
    setting of ``REFUSED`` narrowed to the values the API takes."""
    name = "".join(part.capitalize() for part in method.split("_")) + "Estimator"
    narrowed = {setting: (offered(field, REFUSED[setting]), field)
                for setting, field in settings.model_fields.items() if setting in REFUSED}
    validators = {"_refused": field_validator(*narrowed, mode="before")(refuse)} if narrowed else {}
    return create_model(
        name,
        __base__=settings,
        __doc__=settings.__doc__,
        __validators__=validators,
        method=(Literal[method], Field(method, description="the estimator method")),
        **narrowed,
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
    rules: list[RuleIn] = Field(
        default_factory=list, description="decision rules (docs/guide/decisions.md), names "
        "unique; at most MODELCOMPARE_MAX_RULES")

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

    @model_validator(mode="after")
    def _rules_name_models(self) -> ComparisonIn:
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique, got {names}")
        models = [m.name for m in self.models]
        for rule in self.rules:
            if unknown := unknown_models(rule, models):
                raise ValueError(f"rule {rule.name!r} names models the comparison lacks: "
                                 f"{', '.join(unknown)}")
        return self

    @model_validator(mode="after")
    def _formulas_all_or_none(self) -> ComparisonIn:
        by_formula = [m.name for m in self.models if m.formula is not None]
        if by_formula and len(by_formula) < len(self.models):
            raise ValueError(f"models {by_formula} read named columns by formula: every model "
                             "of a comparison gives a formula, or none does")
        return self


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
    formulas = [m.formula for m in request.models if m.formula is not None]
    design = joint_design(formulas) if formulas else None
    if design is not None and request.x_dim not in (None, len(design.columns)):
        raise ValueError(f"x_dim is {request.x_dim} but the formulas make "
                         f"{len(design.columns)} design columns; leave x_dim out")
    limits.check_shape(len(request.models),
                       request.x_dim if design is None else len(design.columns),
                       [c for m in request.models for c in m.columns or []])
    limits.check_rules(request.rules)
    weights = prior_weights(request.models, [])
    models = [m.spec(w, design and design.columns)
              for m, w in zip(request.models, weights, strict=True)]
    needed = max((max(m.columns) + 1 for m in models if m.columns), default=0)
    x_dim = needed if request.x_dim is None else request.x_dim
    if design is not None:
        x_dim = len(design.columns)
    spec = ComparisonSpec(
        id=cid,
        name=request.name,
        seed=request.seed,
        created_at=created_at,
        x_dim=x_dim,
        has_y=any(m.build().has_target for m in models),
        estimator=stored_estimator(request.estimator),
        models=models,
        variables=design and design.variables,
        target_column=design and design.target,
        design=design and design.columns,
        design_formulas=design and design.formulas,
        rules=[rule.spec(created_at) for rule in request.rules],
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
