"""The evidence body (what GET /evidence, the websocket and ?wait=true return) and BMA mixing.

The only arithmetic here: posterior model probabilities, softmax(log Z + log prior), and the
mixture of per-model predictive summaries with those probabilities.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from modelcompare.models import Prediction
from modelcompare.service import reliability
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.window import bayes_factors


def prior_probabilities(spec: ComparisonSpec) -> dict[str, float]:
    """The models' prior weights normalised in log space: no sum of weights can overflow or
    underflow (two weights of 1e308 are 0.5 each)."""
    logs = {m.name: math.log(m.prior_weight) for m in spec.models}
    top = max(logs.values())
    total = top + math.log(sum(math.exp(value - top) for value in logs.values()))
    return {name: math.exp(value - total) for name, value in logs.items()}


def posterior_probabilities(spec: ComparisonSpec, models: dict[str, dict[str, Any]]) -> dict:
    """Probabilities of the models that have seen every row (not catching up, not failed)."""
    scores = {
        m.name: models[m.name]["log_evidence"] + math.log(m.prior_weight)
        for m in spec.models
        if not models[m.name]["catching_up"]
        and not models[m.name].get("failed")
        and models[m.name]["log_evidence"] is not None
    }
    if not scores:
        return {}
    top = max(scores.values())
    exps = {name: math.exp(score - top) for name, score in scores.items()}
    total = sum(exps.values())
    return {name: value / total for name, value in exps.items()}


def evidence_body(
    spec: ComparisonSpec,
    models: dict[str, dict[str, Any]],
    *,
    version: int,
    sequence: int,
    n_observations: int,
    last_error: dict[str, Any] | None,
    compute_seconds: float | None = None,
    status_reason: str | None = None,
    skipped_chunks: int = 0,
    halted_at: int | None = None,
) -> dict[str, Any]:
    """``models`` maps name -> summary (log_evidence, stderr, n, ess, info, catching_up, ...)."""
    probabilities = posterior_probabilities(spec, models)
    priors = prior_probabilities(spec)
    bodies = [
        {
            "name": m.name,
            "family": m.family,
            "elbo": None,  # MC-CAVI lower bound (service/engine.py); null where none
            "window": None,  # windowed evidence (service/window.py); null before the first chunk
            "reliability": reliability.initial(),  # service/reliability.py
            **models[m.name],
            "prior_probability": priors[m.name],
            "posterior_probability": probabilities.get(m.name),
        }
        for m in spec.models
    ]
    for body in bodies:
        if body["window"] is not None:
            body["window"] = dict(body["window"])  # the Bayes factors are the body's, not stored
    bayes_factors(bodies, set(probabilities))
    return {
        "id": spec.id,
        "version": version,
        "sequence": sequence,
        "n_observations": n_observations,
        "models": bodies,
        "last_error": last_error,
        "compute_seconds": compute_seconds,  # estimator time of the step that made this version
        **status_fields(status_reason, skipped_chunks, halted_at),
    }


def status_fields(
    status_reason: str | None, skipped_chunks: int, halted_at: int | None
) -> dict[str, Any]:
    """``degraded`` while halted on a dead-lettered chunk or once one was skipped (its rows are
    missing from the evidence), with the reason; else ``ok`` (which readers see as ``waiting``
    while no worker that looked could serve it: service/store/waiting.py)."""
    return {
        "status": "degraded" if status_reason else "ok",
        "status_reason": status_reason,
        "skipped_chunks": skipped_chunks,  # dead-lettered chunks left out of the evidence
        "halted_at": halted_at,  # sequence of the chunk processing is halted on, if any
    }


def model_summaries(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Inverse of ``evidence_body`` for the per-model part a worker carries forward."""
    derived = {"name", "family", "prior_probability", "posterior_probability"}
    return {m["name"]: {k: v for k, v in m.items() if k not in derived} for m in body["models"]}


def joined_models(models: dict[str, dict[str, Any]]) -> list[str]:
    """The models that take each new chunk: neither catching up nor failed."""
    return [name for name, summary in models.items()
            if not summary["catching_up"] and not summary["failed"]]


def _tensor_list(value: torch.Tensor | None) -> list[Any] | None:
    return None if value is None else value.tolist()


def prediction_json(prediction: Prediction) -> dict[str, Any]:
    return {
        "mean": _tensor_list(prediction.mean),
        "variance": _tensor_list(prediction.variance),
        "probabilities": _tensor_list(prediction.probabilities),
        "log_density": _tensor_list(prediction.log_density),
    }


def _stack(values: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The parts stacked on a new first axis, or None when some part lacks the field."""
    present = [v for v in values if v is not None]
    return torch.stack(present) if present and len(present) == len(values) else None


def mix(parts: list[tuple[float, Prediction]]) -> dict[str, Any]:
    """The BMA mixture: Σ w_k p_k for densities and probabilities; mean and variance by the law
    of total variance. Fields some part lacks are left out (null)."""
    weights = torch.tensor([w for w, _ in parts], dtype=torch.float64)
    weights = weights / weights.sum()
    preds = [p for _, p in parts]
    out: dict[str, Any] = {"mean": None, "variance": None, "probabilities": None,
                           "log_density": None}
    means, variances = _stack([p.mean for p in preds]), _stack([p.variance for p in preds])
    if means is not None and variances is not None:
        mean = torch.einsum("k,k...->...", weights, means)
        second = torch.einsum("k,k...->...", weights, variances + means**2)
        out["mean"], out["variance"] = mean.tolist(), (second - mean**2).tolist()
    probabilities = _stack([p.probabilities for p in preds])
    if probabilities is not None:
        out["probabilities"] = torch.einsum("k,k...->...", weights, probabilities).tolist()
    densities = _stack([p.log_density for p in preds])
    if densities is not None:
        shape = (-1,) + (1,) * (densities.ndim - 1)
        out["log_density"] = torch.logsumexp(densities + weights.log().reshape(shape), 0).tolist()
    return out


def trace_point(summary: dict[str, Any]) -> dict[str, Any]:
    """One model's point of the trace (GET /history): log Z ± stderr and n, and the diagnostics
    the dashboard plots, ESS (one decimal, as shown), the update's annealing steps, the
    fraction of its SGHMC trajectories undone as diverged and its cloud's width in the
    posterior's units (``spread``; both null while its moves are exact)."""
    ess, info = summary["ess"], summary.get("info") or {}
    return {**{k: summary[k] for k in ("log_evidence", "log_evidence_stderr", "n_observations")},
            "ess": None if ess is None else round(ess, 1),
            "annealing_steps": info.get("annealing_steps"),
            "diverged_fraction": info.get("diverged_fraction"),
            "spread": info.get("spread")}
