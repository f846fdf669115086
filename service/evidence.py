"""The evidence body (what GET /evidence, the websocket and ?wait=true return), a projection of
the progress record (service/progress.py) made at every commit, and BMA mixing.

The only arithmetic here: posterior model probabilities, softmax(log Z + log prior), and the
mixture of per-model predictive summaries with those probabilities.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from modelcompare.models import Prediction
from modelcompare.service.progress import ComparisonProgress, ModelProgress
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.window import bayes_factors


def prior_probabilities(spec: ComparisonSpec) -> dict[str, float]:
    """The models' prior weights normalised in log space: no sum of weights can overflow or
    underflow (two weights of 1e308 are 0.5 each)."""
    logs = {m.name: math.log(m.prior_weight) for m in spec.models}
    top = max(logs.values())
    total = top + math.log(sum(math.exp(value - top) for value in logs.values()))
    return {name: math.exp(value - total) for name, value in logs.items()}


def posterior_probabilities(spec: ComparisonSpec,
                            progress: ComparisonProgress) -> dict[str, float]:
    """Probabilities of the models that have seen every row (not catching up, not failed)."""
    scores = {
        m.name: model.log_evidence + math.log(m.prior_weight)
        for m in spec.models
        if not (model := progress.models[m.name]).catching_up
        and not model.failed
        and model.log_evidence is not None
    }
    if not scores:
        return {}
    top = max(scores.values())
    exps = {name: math.exp(score - top) for name, score in scores.items()}
    total = sum(exps.values())
    return {name: value / total for name, value in exps.items()}


def evidence_body(spec: ComparisonSpec, progress: ComparisonProgress) -> dict[str, Any]:
    """The public view of ``progress`` (what GET /evidence returns, as
    service/api/responses.py ``Evidence`` declares it): per model its reading, windowed evidence
    with log Bayes factors, reliability and prior and posterior probabilities; the status is
    ``degraded`` while halted on a dead-lettered chunk or once one was skipped (its rows are
    missing from the evidence), with the reason, else ``ok`` (which readers see as ``waiting``
    while no worker that looked could serve it: service/store/waiting.py)."""
    probabilities = posterior_probabilities(spec, progress)
    priors = prior_probabilities(spec)
    windows = bayes_factors({m.name: progress.models[m.name].window for m in spec.models},
                            set(probabilities))
    error = progress.last_error
    return {
        "id": spec.id,
        "version": progress.version,
        "sequence": progress.sequence,
        "n_observations": progress.n_observations,
        "models": [
            _model_body(m, progress.models[m.name], windows[m.name], priors[m.name],
                        probabilities.get(m.name))
            for m in spec.models
        ],
        "last_error": None if error is None else error.model_dump(),
        "compute_seconds": progress.compute_seconds,
        "status": "degraded" if progress.status_reason else "ok",
        "status_reason": progress.status_reason,
        "skipped_chunks": progress.skipped_chunks,
        "halted_at": progress.halted_at,
    }


def _model_body(spec: ModelSpec, model: ModelProgress, window: dict[str, Any] | None,
                prior: float, posterior: float | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "family": spec.family,
        "elbo": model.elbo,
        "window": window,
        "reliability": model.reliability.model_dump(),
        "elbo_n_observations": model.elbo_n_observations,
        "log_evidence": model.log_evidence,
        "log_evidence_stderr": model.log_evidence_stderr,
        "n_observations": model.n_observations,
        "ess": model.ess,
        "info": model.info,
        "catching_up": model.catching_up,
        "failed": model.failed,
        "sequence": model.sequence,
        "prior_probability": prior,
        "posterior_probability": posterior,
    }


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


def trace_point(model: ModelProgress) -> dict[str, Any]:
    """One model's point of the trace (GET /history): log Z ± stderr and n, and the diagnostics
    the dashboard plots, ESS (one decimal, as shown), the update's annealing steps, the
    fraction of its SGHMC trajectories undone as diverged and its cloud's width in the
    posterior's units (``spread``; both null while its moves are exact)."""
    info = model.info or {}
    return {"log_evidence": model.log_evidence,
            "log_evidence_stderr": model.log_evidence_stderr,
            "n_observations": model.n_observations,
            "ess": None if model.ess is None else round(model.ess, 1),
            "annealing_steps": info.get("annealing_steps"),
            "diverged_fraction": info.get("diverged_fraction"),
            "spread": info.get("spread")}
