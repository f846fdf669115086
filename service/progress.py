"""The worker's record of a comparison: where each model stands after the chunks applied.

A stored record and its public view are different types (full-stack-fastapi-template's ``Item``
and ``ItemPublic``): ``ComparisonProgress`` is what the worker reads and writes, stored as JSON
beside the model states (``Keys.progress``) by the same compare-and-set commit; the evidence
body of GET /evidence is a projection of it (service/evidence.py: ``evidence_body``), never
read back. It changes only by the pure reducers of service/reducers.py, window.py and
reliability.py, each returning a new record. ``encode`` and ``decode`` are its only codec (arq's
``serialize_result`` beside ``JobResult``); records stored before it existed are built from the
stored evidence body once (service/migration.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# (rows seen, log Z, Var log Z) after an applied chunk (service/window.py)
Checkpoint = tuple[int, float, float]


class Window(Record):
    """log p(last ``rows`` rows | earlier rows) and its standard error (service/window.py)."""

    rows: int
    log_evidence: float
    log_evidence_stderr: float


class Reliability(Record):
    """Whether log Z still deserves its error bar (service/reliability.py); sticky."""

    reliable: bool = True
    reason: str | None = None
    max_diverged_fraction: float = 0.0
    diverged_updates: int = 0
    first_diverged_at: int | None = None
    frozen_at: int | None = None
    wide_at: int | None = None


class Reading(Record):
    """What a model's state says after an update (``Runner.reading``): the running log Z, its
    standard error, the rows seen and the ESS (null where not finite), the estimator's Info
    (null before the first update) and, when this update computed it, the MC-CAVI bound on
    log Z of the first ``elbo_n_observations`` rows (``refreshed_elbo``)."""

    log_evidence: float | None
    log_evidence_stderr: float | None
    n_observations: int
    ess: float | None
    info: dict[str, Any] | None
    refreshed_elbo: bool = False
    elbo: float | None = None
    elbo_n_observations: int = 0


class ModelProgress(Record):
    """One model: its last reading, the chunks it has taken (``sequence``), its windowed
    evidence with the checkpoints it is read from (internal: not in the public body), its
    reliability record, and whether it is replaying the history or failed (why)."""

    sequence: int
    n_observations: int
    log_evidence: float | None
    log_evidence_stderr: float | None
    ess: float | None
    info: dict[str, Any] | None
    elbo: float | None = None
    elbo_n_observations: int = 0
    window: Window | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    reliability: Reliability = Reliability()
    catching_up: bool = False
    failed: str | None = None


class LastError(Record):
    """The last chunk given up on (dead-lettered), and why."""

    sequence: int
    message: str


class RuleState(Record):
    """Where a decision rule stands (service/decisions.py): firing or not, the consecutive
    chunks its condition has held (or, for best_changed, another model has led), the best model
    it last saw (best_changed only) and the checkpoints (rows, log BF, Var log BF) its window
    is read from (window rules only)."""

    firing: bool = False
    streak: int = 0
    best: str | None = None
    checkpoints: tuple[Checkpoint, ...] = ()


class ComparisonProgress(Record):
    """A comparison at ``version`` (the meta's): chunks applied and rows they held, the last
    chunk given up on, the chunks skipped and why the status is degraded, the chunk processing
    is halted on, the estimator time of the step that made this version, every model, and the
    state of each decision rule of the spec (a rule without one has not been evaluated)."""

    version: int
    sequence: int
    n_observations: int
    last_error: LastError | None = None
    skipped_chunks: int = 0
    status_reason: str | None = None
    halted_at: int | None = None
    compute_seconds: float | None = None
    models: dict[str, ModelProgress]
    rules: dict[str, RuleState] = {}

    @property
    def joined(self) -> list[str]:
        """The models that take each new chunk: neither catching up nor failed."""
        return [name for name, m in self.models.items() if not m.catching_up and not m.failed]

    @property
    def catching_up(self) -> int:
        """How many models are replaying the history."""
        return sum(m.catching_up for m in self.models.values())


def encode(progress: ComparisonProgress) -> bytes:
    """The stored form: JSON (floats round-trip exactly; no NaN or infinity is ever held). A
    record without rule states is stored without the field, as before rules existed, so that
    a worker of that version still reads it (the record forbids unknown fields)."""
    return progress.model_dump_json(exclude={"rules"} if not progress.rules else None).encode()


def decode(raw: bytes | str) -> ComparisonProgress:
    return ComparisonProgress.model_validate_json(raw)


def current(raw: bytes | None, version: int) -> ComparisonProgress | None:
    """The stored record, or None when there is none at ``version`` (the meta's): stored
    before the record existed, or by a process that wrote only the evidence body."""
    if raw is None:
        return None
    progress = decode(raw)
    return progress if progress.version == version else None
