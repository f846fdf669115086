"""Estimators by method name, with their configuration built from keyword settings."""

from __future__ import annotations

import dataclasses
from typing import Any

from estimators.ais import AIS, AISConfig
from estimators.base import Estimator, EstimatorConfigError
from estimators.exact import Exact
from estimators.hybrid import Hybrid, HybridConfig
from estimators.minibatch_mh import MinibatchMH
from estimators.moves import MoveConfig
from estimators.nested import Nested, NestedConfig
from estimators.sequential import Sequential
from estimators.sgais import SGAIS, SGAISConfig

METHODS = ("sgais", "sequential", "exact", "minibatch_mh", "ais", "nested", "hybrid")


def _config(config_type: type, settings: dict[str, Any]) -> Any:
    known = {field.name for field in dataclasses.fields(config_type)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise EstimatorConfigError(
            f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    try:
        return config_type(**settings)
    except TypeError as exc:
        raise EstimatorConfigError(str(exc)) from None


def build_estimator(method: str, model: Any, **settings: Any) -> Estimator[Any]:
    """An estimator for ``model``; raises ``EstimatorConfigError`` for bad method or settings."""
    if method == "sgais":
        return SGAIS(model, _config(SGAISConfig, settings))
    if method == "minibatch_mh":
        return MinibatchMH(model, _config(SGAISConfig, settings))
    if method == "sequential":
        return Sequential(model, _config(MoveConfig, settings))
    if method == "ais":
        return AIS(model, _config(AISConfig, settings))
    if method == "hybrid":
        return Hybrid(model, _config(HybridConfig, settings))
    if method == "nested":
        # Callers pass ``particles`` to every method; for nested sampling it means live points.
        particles = settings.pop("particles", None)
        if particles is not None and "live_points" not in settings:
            settings["live_points"] = particles
        return Nested(model, _config(NestedConfig, settings))
    if method == "exact":
        settings.pop("particles", None)
        _config(_NoSettings, settings)
        try:
            return Exact(model)
        except TypeError as exc:
            raise EstimatorConfigError(str(exc)) from None
    raise EstimatorConfigError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


@dataclasses.dataclass(frozen=True)
class _NoSettings:
    pass
