"""How a comparison's progress record changes: pure functions from a record to the next one.

A worker step is ``settled`` (catch-up only), ``after_chunk`` (a chunk applied to the models
that take it) or ``after_skip`` (a chunk given up on, committed empty); models leave by
``marked_failed`` and replay the history by ``after_reading`` per block (service/catch_up.py).
``halted`` and ``resumed`` follow a dead-lettered chunk; ``started``, ``with_model``,
``without_model`` and ``without_rule_state`` are the API's (create, add and remove a model or a
decision rule). The version is the writer's:
``next_version`` at the commit.
"""

from __future__ import annotations

from modelcompare.service.core.config import Settings
from modelcompare.service.progress import ComparisonProgress, LastError, ModelProgress, Reading
from modelcompare.service.reliability import observe
from modelcompare.service.window import advance


def started(reading: Reading, catching_up: bool) -> ModelProgress:
    """A model before it has seen any row (``reading``: of its initial state)."""
    return ModelProgress(
        sequence=0,
        n_observations=reading.n_observations,
        log_evidence=reading.log_evidence,
        log_evidence_stderr=reading.log_evidence_stderr,
        ess=reading.ess,
        info=reading.info,
        elbo=reading.elbo,
        elbo_n_observations=reading.elbo_n_observations,
        catching_up=catching_up,
    )


def after_reading(model: ModelProgress, reading: Reading, sequence: int,
                  settings: Settings) -> ModelProgress:
    """A model after its update of chunk ``sequence``: the new reading (the MC-CAVI bound only
    where the update refreshed it), its window advanced and its reliability record observed."""
    elbo = (reading.elbo, reading.elbo_n_observations) if reading.refreshed_elbo else (
        model.elbo, model.elbo_n_observations)
    read = model.model_copy(update={
        "sequence": sequence,
        "n_observations": reading.n_observations,
        "log_evidence": reading.log_evidence,
        "log_evidence_stderr": reading.log_evidence_stderr,
        "ess": reading.ess,
        "info": reading.info,
        "elbo": elbo[0],
        "elbo_n_observations": elbo[1],
    })
    windowed = advance(read, settings.evidence_window_rows)
    return windowed.model_copy(update={"reliability": observe(
        windowed.reliability, reading.info, reading.n_observations,
        settings.diverged_warning_fraction)})


def marked_failed(progress: ComparisonProgress, failing: dict[str, str]) -> ComparisonProgress:
    """The models in ``failing`` marked failed with the reason given: they leave the
    comparison (out of the probabilities, no longer updated)."""
    if not failing:
        return progress
    return _with_models(progress, {name: progress.models[name].model_copy(
        update={"failed": why}) for name, why in failing.items()})


def settled(progress: ComparisonProgress) -> ComparisonProgress:
    """The comparison-wide part of a worker step that applies no chunk: no estimator time, not
    halted, degraded only while some chunk was skipped."""
    return progress.model_copy(update={
        "compute_seconds": None,
        "halted_at": None,
        "status_reason": progress.status_reason if progress.skipped_chunks else None,
    })


def after_chunk(progress: ComparisonProgress, readings: dict[str, Reading], sequence: int,
                rows: int, seconds: float, settings: Settings) -> ComparisonProgress:
    """Chunk ``sequence`` of ``rows`` rows applied: every model that took it (``readings``,
    one per joined model) read after its update, in ``seconds`` of estimator time."""
    models = {name: after_reading(progress.models[name], reading, sequence, settings)
              for name, reading in readings.items()}
    return _with_models(settled(progress), models).model_copy(update={
        "sequence": sequence,
        "n_observations": progress.n_observations + rows,
        "compute_seconds": seconds,
    })


def after_skip(progress: ComparisonProgress, sequence: int, message: str) -> ComparisonProgress:
    """Chunk ``sequence`` given up on (``message``: why) and committed as an empty block: the
    joined models pass it, its rows are left out, the comparison reports itself degraded."""
    skipped = progress.skipped_chunks + 1
    models = {name: progress.models[name].model_copy(update={"sequence": sequence})
              for name in progress.joined}
    return _with_models(settled(progress), models).model_copy(update={
        "sequence": sequence,
        "last_error": LastError(sequence=sequence, message=message),
        "skipped_chunks": skipped,
        "status_reason": f"{skipped} chunk(s) dead-lettered and skipped, their rows left out "
                         f"of the evidence (last: chunk {sequence}, {message})",
    })


def halted(progress: ComparisonProgress, sequence: int, message: str,
           reason: str) -> ComparisonProgress:
    """Processing stops on chunk ``sequence`` (dead-lettered: ``message``) until an operator
    resumes it; the models keep their last good state."""
    return progress.model_copy(update={
        "last_error": LastError(sequence=sequence, message=message),
        "status_reason": reason,
        "halted_at": sequence,
        "compute_seconds": None,
    })


def resumed(progress: ComparisonProgress, reason: str | None) -> ComparisonProgress:
    """An operator resumed the halted comparison; ``reason``: why it is still degraded."""
    return progress.model_copy(update={"status_reason": reason, "halted_at": None})


def with_model(progress: ComparisonProgress, name: str,
               model: ModelProgress) -> ComparisonProgress:
    """A model added (no estimator time in the version that adds it)."""
    return _with_models(progress, {name: model}).model_copy(update={"compute_seconds": None})


def without_model(progress: ComparisonProgress, name: str) -> ComparisonProgress:
    """A model removed (no estimator time in the version that removes it)."""
    models = {n: m for n, m in progress.models.items() if n != name}
    return progress.model_copy(update={"models": models, "compute_seconds": None})


def without_rule_state(progress: ComparisonProgress, name: str) -> ComparisonProgress:
    """A rule added or removed: it starts (again) from no state."""
    rules = {n: state for n, state in progress.rules.items() if n != name}
    return progress.model_copy(update={"rules": rules, "compute_seconds": None})


def next_version(progress: ComparisonProgress) -> ComparisonProgress:
    return progress.model_copy(update={"version": progress.version + 1})


def _with_models(progress: ComparisonProgress,
                 models: dict[str, ModelProgress]) -> ComparisonProgress:
    return progress.model_copy(update={"models": {**progress.models, **models}})
