"""modelcompare: streaming, online Bayesian model comparison.

One import package: ``modelcompare.models`` (the compared models), ``modelcompare.estimators``
(how the evidence is estimated) and ``modelcompare.service`` (HTTP API, Redis, workers, CLI and
the Python client). The repository keeps the three as its top-level folders models/,
estimators/ and service/; pyproject.toml maps them here. The short names below are imported on
first use, so ``import modelcompare`` alone loads neither torch nor the service.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelcompare.estimators import (
        BudgetExceeded,
        Deadline,
        EstimatorConfigError,
        OnlineEvidence,
        exact_log_evidence,
    )
    from modelcompare.models import FAMILIES, build_model
    from modelcompare.service.client import AsyncClient, Client, ModelCompareError

# In a source checkout the sub-packages are this folder's siblings (an install maps them into
# it): there they are found beside it, so that the code of the checkout a process starts in
# (current folder or PYTHONPATH) is the code it runs, installed or not, and never another
# checkout's through an editable install.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if not os.path.isdir(os.path.join(_HERE, "service")) and all(
    os.path.isfile(os.path.join(_ROOT, package, "__init__.py"))
    for package in ("models", "estimators", "service")
):
    __path__.append(_ROOT)

_SHORT_NAMES = {
    "OnlineEvidence": "modelcompare.estimators",
    "exact_log_evidence": "modelcompare.estimators",
    "Deadline": "modelcompare.estimators",
    "BudgetExceeded": "modelcompare.estimators",
    "EstimatorConfigError": "modelcompare.estimators",
    "FAMILIES": "modelcompare.models",
    "build_model": "modelcompare.models",
    "Client": "modelcompare.service.client",
    "AsyncClient": "modelcompare.service.client",
    "ModelCompareError": "modelcompare.service.client",
}
_SUBPACKAGES = ("models", "estimators", "service")

__all__ = [
    "FAMILIES",
    "AsyncClient",
    "BudgetExceeded",
    "Client",
    "Deadline",
    "EstimatorConfigError",
    "ModelCompareError",
    "OnlineEvidence",
    "__version__",
    "build_model",
    "exact_log_evidence",
]


def __getattr__(name: str) -> Any:
    if name in _SHORT_NAMES:
        value = getattr(importlib.import_module(_SHORT_NAMES[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name == "__version__":
        from importlib.metadata import version

        value = version("modelcompare")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})
