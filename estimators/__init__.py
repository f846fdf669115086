"""Evidence estimators: pure functions over explicit state, no I/O."""

from estimators.ais import AIS, AISConfig, run_ais
from estimators.base import Estimator, EstimatorConfigError, EstimatorError, Info
from estimators.batch import BatchEstimator, BatchEvidence, BatchState
from estimators.exact import Exact, ExactState
from estimators.history import ColumnView, History, InMemoryHistory, Rows
from estimators.hybrid import Hybrid, HybridConfig
from estimators.minibatch_mh import MinibatchMH
from estimators.minibatch_target import MinibatchTarget
from estimators.moves import MoveConfig
from estimators.nested import Nested, NestedConfig, run_nested, run_rejection_nested
from estimators.online import OnlineEvidence, exact_log_evidence
from estimators.registry import METHODS, build_estimator
from estimators.sequential import Sequential
from estimators.serialization import state_from_bytes, state_to_bytes
from estimators.sgais import SGAIS, SGAISConfig, SGAISState

__all__ = [
    "AIS",
    "METHODS",
    "SGAIS",
    "AISConfig",
    "BatchEstimator",
    "BatchEvidence",
    "BatchState",
    "ColumnView",
    "Estimator",
    "EstimatorConfigError",
    "EstimatorError",
    "Exact",
    "ExactState",
    "History",
    "Hybrid",
    "HybridConfig",
    "InMemoryHistory",
    "Info",
    "MinibatchMH",
    "MinibatchTarget",
    "MoveConfig",
    "Nested",
    "NestedConfig",
    "OnlineEvidence",
    "Rows",
    "SGAISConfig",
    "SGAISState",
    "Sequential",
    "build_estimator",
    "exact_log_evidence",
    "run_ais",
    "run_nested",
    "run_rejection_nested",
    "state_from_bytes",
    "state_to_bytes",
]
