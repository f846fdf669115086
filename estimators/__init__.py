"""Evidence estimators: pure functions over explicit state, no I/O."""

from estimators.base import Estimator, EstimatorConfigError, EstimatorError, Info
from estimators.exact import Exact, ExactState
from estimators.history import ColumnView, History, InMemoryHistory, Rows
from estimators.moves import MoveConfig
from estimators.online import OnlineEvidence, exact_log_evidence
from estimators.registry import METHODS, build_estimator
from estimators.sequential import Sequential
from estimators.serialization import state_from_bytes, state_to_bytes
from estimators.sgais import SGAIS, SGAISConfig, SGAISState

__all__ = [
    "METHODS",
    "SGAIS",
    "ColumnView",
    "Estimator",
    "EstimatorConfigError",
    "EstimatorError",
    "Exact",
    "ExactState",
    "History",
    "InMemoryHistory",
    "Info",
    "MoveConfig",
    "OnlineEvidence",
    "Rows",
    "SGAISConfig",
    "SGAISState",
    "Sequential",
    "build_estimator",
    "exact_log_evidence",
    "state_from_bytes",
    "state_to_bytes",
]
