"""The stored records of a comparison and its models: what the API writes once a request is
validated (service/schemas.py) and what workers read to continue it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from modelcompare.estimators import EstimatorConfigError, build
from modelcompare.estimators.online.dimension import pools_mass
from modelcompare.models import FamilyUnavailable, Model, build_model, families
from modelcompare.service.limits import check_size, state_bytes
from modelcompare.service.rules import RuleSpec

# Larger magnitudes overflow float64 in the likelihoods (squares, x·θ summed over rows) and
# would turn a model's evidence into -inf: refused at the door instead of dead-lettered.
MAX_ABS_VALUE = 1e100


class ModelSpec(BaseModel):
    """A model as stored: its family with the package and version that provided it, the full
    config, the columns it reads, its unnormalised prior weight, the values its y may take
    (``Target.public``; None without a target) and its formula (None for a model of a matrix
    comparison). Records made before packages were recorded have None there, and the target
    only when the family has none."""

    name: str
    family: str
    package: str | None = None
    version: str | None = None
    config: dict[str, Any]
    columns: list[int]
    prior_weight: float
    target: dict[str, Any] | None = None
    formula: str | None = None

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
    """A comparison as stored. A named one (models by formula) stores its design columns
    (``design``, x_dim of them) from the input columns ``variables`` and ``target_column`` of
    a chunk; ``design_formulas`` are the formulas it was created with, which make the design
    even after their models are removed (``modelcompare.service.formula.design_rows``). All
    four are None for a matrix comparison (models by index ``columns``). ``rules``: its
    decision rules (service/rules.py)."""

    id: str
    name: str
    seed: int
    created_at: float
    x_dim: int
    has_y: bool
    estimator: dict[str, Any]  # method and settings
    models: list[ModelSpec]
    variables: list[str] | None = None
    target_column: str | None = None
    design: list[str] | None = None
    design_formulas: list[str] | None = None
    rules: list[RuleSpec] = []

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
        return state_bytes(model.param_dim, estimator.particles, int(settings.get("islands", 1)),
                           pools_mass(estimator.settings, model.param_dim))
