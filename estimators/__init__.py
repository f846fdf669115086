"""Evidence estimators: pure functions over explicit state, no I/O.

``build(model, method, **settings)`` binds a model to a method (``METHODS``) as an ``Estimator``
record of functions; ``OnlineEvidence`` wraps one for a stream of arrays. The sub-packages hold
the parts: ``online`` (the streaming methods), ``references`` (full-data baselines), ``smc``
(the tempered step and its weights, resampling and temperature rules), ``moves`` (MCMC kernels),
``variational`` (MC-CAVI), ``functionals`` (debiased posterior expectations) and ``data``
(history, randomness, serialisation, the chunk schedule).
"""

from modelcompare.estimators.data.history import ColumnView, History, InMemoryHistory, Rows
from modelcompare.estimators.data.serialization import state_from_bytes, state_to_bytes
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.errors import (
    BudgetExceeded,
    CutOff,
    EstimatorConfigError,
    EstimatorError,
    Progress,
)
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.methods import METHODS, Method, build
from modelcompare.estimators.online.exact import ExactInfo, ExactState
from modelcompare.estimators.online.hybrid import HybridInfo
from modelcompare.estimators.online.sequential import SequentialInfo
from modelcompare.estimators.online.settings import (
    ExactSettings,
    HybridSettings,
    MinibatchMHSettings,
    SequentialSettings,
    SGAISSettings,
)
from modelcompare.estimators.online.sgais import SGAISInfo
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.references.ais import AISSettings, run_ais
from modelcompare.estimators.references.batch import BatchEvidence, BatchState, RerunInfo
from modelcompare.estimators.references.nested import (
    NestedSettings,
    run_nested,
    run_rejection_nested,
)
from modelcompare.estimators.settings import Settings
from modelcompare.estimators.tracker import OnlineEvidence, exact_log_evidence

__all__ = [
    "METHODS",
    "AISSettings",
    "BatchEvidence",
    "BatchState",
    "BudgetExceeded",
    "ColumnView",
    "CutOff",
    "Deadline",
    "Estimator",
    "EstimatorConfigError",
    "EstimatorError",
    "ExactInfo",
    "ExactSettings",
    "ExactState",
    "History",
    "HybridInfo",
    "HybridSettings",
    "InMemoryHistory",
    "Method",
    "MinibatchMHSettings",
    "NestedSettings",
    "OnlineEvidence",
    "ParticleState",
    "Progress",
    "RerunInfo",
    "Rows",
    "SGAISInfo",
    "SGAISSettings",
    "SequentialInfo",
    "SequentialSettings",
    "Settings",
    "build",
    "exact_log_evidence",
    "run_ais",
    "run_nested",
    "run_rejection_nested",
    "state_from_bytes",
    "state_to_bytes",
]
