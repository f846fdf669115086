"""The request shape of one model of a comparison: ``BaseModelIn``, and one variant per
family of ``modelcompare.models.FAMILIES`` (``ModelIn``, told apart by ``family``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, Field, create_model, model_validator

from modelcompare.models import FAMILIES, Model, build_model, families
from modelcompare.models.config import FamilyConfig, integral
from modelcompare.service.formula import MAX_FORMULA_CHARS, CompiledFormula, compile_formula
from modelcompare.service.limits import check_size
from modelcompare.service.names import NAME_MAX_CHARS, NAME_PATTERN, STRICT_JSON
from modelcompare.service.records import ModelSpec

NonNegative = Annotated[int, Field(ge=0), BeforeValidator(integral)]


class BaseModelIn(BaseModel):
    """A model of a comparison: ``family`` picks the shape of ``config`` (one variant per family
    of ``modelcompare.models.FAMILIES``, below)."""

    model_config = STRICT_JSON
    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX_CHARS,
                      description="unique within the comparison; letters, digits, _ . - (not "
                      "dots alone)")
    family: str
    config: FamilyConfig
    columns: list[NonNegative] | None = Field(
        default=None,
        description="indices of the columns of x this model reads, one per config.dim; "
        "default: the first dim columns (not with formula)",
    )
    formula: str | None = Field(
        default=None, max_length=MAX_FORMULA_CHARS,
        description="a Wilkinson formula over named columns instead of columns, e.g. "
        "'target ~ bmi + bp + bmi:bp + C(sex, levels=[1, 2])' (docs/guide/formulas.md); "
        "config.dim may then be left out: it is the design width",
        examples=["target ~ bmi + bp"],
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

    @model_validator(mode="before")
    @classmethod
    def _dim_from_formula(cls, data: Any) -> Any:
        """``config.dim``, when left out, is the formula's design width; given, it must be."""
        formula = data.get("formula") if isinstance(data, dict) else None
        if not isinstance(formula, str):
            return data
        if data.get("columns") is not None:
            raise ValueError('a model reads "formula" or "columns", not both')
        config = data.get("config", {})
        columns = compile_formula(formula).columns
        record = cls.model_fields["config"].annotation
        if not isinstance(config, dict) or not (isinstance(record, type)
                                                 and issubclass(record, FamilyConfig)):
            return data
        if "dim" not in record.model_fields:
            if columns:
                raise ValueError(f"formula {formula!r} makes {len(columns)} design columns but "
                                 f"the family reads no inputs: its formula is 'target ~ 1'")
            return data
        dim = config.get("dim", len(columns))
        if isinstance(dim, int | float) and not isinstance(dim, bool) and dim != len(columns):
            raise ValueError(f"config.dim is {dim} but formula {formula!r} makes "
                             f"{len(columns)} design columns ({', '.join(columns) or 'none'})")
        return {**data, "config": {**config, "dim": dim}}

    def build(self) -> Model:
        return build_model(self.family, **self.config.model_dump())

    def spec(self, prior_weight: float, design: list[str] | None = None) -> ModelSpec:
        """The stored model; a model by formula reads its design columns of ``design`` (the
        comparison's, holding all of them)."""
        model = self.build()
        check_size(self.name, model.param_dim, 1)  # before anything is sized by the model
        if self.formula is not None:
            formula = compile_formula(self.formula)
            self._check_target(model, formula)
            columns = [(design or []).index(c) for c in formula.columns]
        else:
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
            formula=self.formula,
        )

    def _check_target(self, model: Model, formula: CompiledFormula) -> None:
        if model.has_target and formula.target is None:
            raise ValueError(f"model {self.name!r}: family {self.family!r} has a target; name "
                             f"it on the left of the formula: 'target ~ …'")
        if not model.has_target and formula.target is not None:
            raise ValueError(f"model {self.name!r}: family {self.family!r} has no target; leave "
                             f"the left side out: '~ …'")


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
