"""The service's size limits: fixed ceilings per model (``check_size``) and the configurable
limits per comparison (``Limits``, from ``modelcompare.service.core.config.Settings``;
docs/guide/limits.md), checked before any state is allocated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from modelcompare.service.rules import RuleIn, RuleSpec
    from modelcompare.service.schemas import ComparisonSpec

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


# A model's stored state (a safetensors record of the estimator state), bounded from above: per
# particle its parameters, its log-weight, and its Eve and the Eve's weight (SG-AIS's genealogy,
# ``modelcompare.estimators.online.state.ParticleState``); per particle system (``islands``) the
# control-variate anchor (a point and a gradient) and its scalars, and where the moves pool
# their mass matrix (``modelcompare.estimators.smc.mass``) its D × D covariance; per record the
# header.
PARTICLE_VALUES = 3
SYSTEM_VALUES = 16
HEADER_BYTES = 2_048


def state_bytes(
    parameters: int, particles: int, systems: int = 1, mass_pool: bool = False
) -> int:
    """An upper bound on a model's stored state in float64: ``particles`` (over all ``systems``)
    × (parameters + 3) values and 2 × parameters + 16 per system, plus parameters² per system
    with a ``mass_pool``, or for a closed-form (exact, ``particles`` 0) state its mean and D×D
    covariance; and the record's header."""
    if not particles:
        return 8 * parameters * (parameters + 1) + HEADER_BYTES
    per_system = 2 * parameters + SYSTEM_VALUES + (parameters**2 if mass_pool else 0)
    values = particles * (parameters + PARTICLE_VALUES) + systems * per_system
    return 8 * values + HEADER_BYTES


class LimitExceeded(ValueError):
    """A request over one of the service's configurable limits (``Limits``): the 422 names it."""

    def __init__(self, limit: str, value: int, allowed: int, what: str) -> None:
        super().__init__(f"{what}: {value:,} exceeds the limit {limit} = {allowed:,} "
                         f"(MODELCOMPARE_{limit.upper()})")
        self.details = {"limit": limit, "value": value, "allowed": allowed}


@dataclass(frozen=True)
class Limits:
    """What one comparison may ask for; the values (and their defaults) are settings
    (``modelcompare.service.core.config.Settings``, docs/guide/limits.md)."""

    max_models: int
    max_comparison_parameters: int
    max_state_bytes: int
    max_x_dim: int
    max_rules: int
    max_rule_window_rows: int

    def check_shape(self, models: int, x_dim: int | None, columns: list[int]) -> None:
        """The counts a request states, before any model is built."""
        if models > self.max_models:
            raise LimitExceeded("max_models", models, self.max_models, "models")
        if x_dim is not None and x_dim > self.max_x_dim:
            raise LimitExceeded("max_x_dim", x_dim, self.max_x_dim, "x_dim")
        if columns and max(columns) >= self.max_x_dim:
            raise LimitExceeded("max_x_dim", max(columns) + 1, self.max_x_dim,
                                f"column {max(columns)} needs x_dim")

    def check_rules(self, rules: Sequence[RuleIn | RuleSpec]) -> None:
        """The decision rules of one comparison: how many, and the rows of their windows."""
        if len(rules) > self.max_rules:
            raise LimitExceeded("max_rules", len(rules), self.max_rules, "rules")
        for rule in rules:
            window = rule.when.window_log_bayes_factor
            if window is not None and window.rows > self.max_rule_window_rows:
                raise LimitExceeded("max_rule_window_rows", window.rows,
                                    self.max_rule_window_rows, f"rule {rule.name!r}: rows")

    def check(self, spec: ComparisonSpec) -> None:
        """Every model of ``spec`` valid, and their parameters and state bytes within bounds."""
        self.check_shape(len(spec.models), spec.x_dim, [])
        parameters, stored = 0, 0
        for model in spec.models:
            stored += spec.check_model(model)
            parameters += model.build().param_dim
        if parameters > self.max_comparison_parameters:
            raise LimitExceeded("max_comparison_parameters", parameters,
                                self.max_comparison_parameters, "parameters over all models")
        if stored > self.max_state_bytes:
            raise LimitExceeded("max_state_bytes", stored, self.max_state_bytes,
                                "bytes of model state (about particles × (parameters + 3) × 8 "
                                "per model, or D×D × 8 for exact; docs/guide/limits.md)")
