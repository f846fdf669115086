"""The estimator methods by name, and ``build``: a model bound to a method and its settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from modelcompare.estimators.errors import EstimatorConfigError
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import exact, hybrid, minibatch_mh, sequential, sgais
from modelcompare.estimators.online.settings import (
    ExactSettings,
    HybridSettings,
    MinibatchMHSettings,
    SequentialSettings,
    SGAISSettings,
)
from modelcompare.estimators.references import ais, nested
from modelcompare.estimators.references.ais import AISSettings
from modelcompare.estimators.references.nested import NestedSettings
from modelcompare.estimators.settings import Settings
from modelcompare.models import Model


class Method(NamedTuple):
    settings: type[Settings]  # the record that validates the method's settings
    bind: Callable[[Model, Any], Estimator[Any, Any]]  # (model, settings record) -> Estimator


METHODS: dict[str, Method] = {
    "sgais": Method(SGAISSettings, sgais.bind),
    "sequential": Method(SequentialSettings, sequential.bind),
    "exact": Method(ExactSettings, exact.bind),
    "minibatch_mh": Method(MinibatchMHSettings, minibatch_mh.bind),
    "ais": Method(AISSettings, ais.bind),
    "nested": Method(NestedSettings, nested.bind),
    "hybrid": Method(HybridSettings, hybrid.bind),
}


def build(model: Model, method: str = "sgais", **settings: Any) -> Estimator[Any, Any]:
    """``model`` bound to ``method`` with ``settings`` (checked by the method's record);
    ``EstimatorConfigError`` for an unknown method, unknown or out-of-range settings, or a
    method the model cannot use (``exact`` without a closed form)."""
    if method not in METHODS:
        raise EstimatorConfigError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    entry = METHODS[method]
    return entry.bind(model, entry.settings.parse(settings))
