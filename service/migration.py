"""Comparisons stored before the progress record existed: their record, built once from the
stored evidence body (the worker carried its state in that body then, ``window_checkpoints``
included). The next commit stores the record; from then on the body is only written."""

from __future__ import annotations

from typing import Any

from modelcompare.service.progress import (
    ComparisonProgress,
    LastError,
    ModelProgress,
    Reliability,
    Window,
)

# Info fields renamed since bodies were stored: the record holds the new names only
RENAMED_INFO = {"restarted": "reestimated"}


def progress_from_body(body: dict[str, Any]) -> ComparisonProgress:
    """The record a stored evidence body describes (fields missing from older bodies take the
    values ``evidence_body`` gave them then)."""
    error = body["last_error"]
    return ComparisonProgress(
        version=body["version"],
        sequence=body["sequence"],
        n_observations=body["n_observations"],
        last_error=None if error is None else LastError(**error),
        skipped_chunks=body.get("skipped_chunks", 0),
        status_reason=body.get("status_reason"),
        halted_at=body.get("halted_at"),
        compute_seconds=body.get("compute_seconds"),
        models={m["name"]: _model(m) for m in body["models"]},
    )


def _model(body: dict[str, Any]) -> ModelProgress:
    window, info = body.get("window"), body.get("info")
    return ModelProgress(
        sequence=body["sequence"],
        n_observations=body["n_observations"],
        log_evidence=body["log_evidence"],
        log_evidence_stderr=body["log_evidence_stderr"],
        ess=body["ess"],
        info=None if info is None else {RENAMED_INFO.get(k, k): v for k, v in info.items()},
        elbo=body.get("elbo"),
        elbo_n_observations=body.get("elbo_n_observations", 0),
        window=None if window is None else Window(
            rows=window["rows"], log_evidence=window["log_evidence"],
            log_evidence_stderr=window["log_evidence_stderr"]),
        checkpoints=tuple(tuple(p) for p in body.get("window_checkpoints") or ()),
        reliability=Reliability(**(body.get("reliability") or {})),
        catching_up=body["catching_up"],
        failed=body["failed"],
    )
