"""The model inside the estimator: its state saved and resumed bit for bit, and SG-AIS's log Z
on the check's rows against an independent answer.

The reference is the closed form where the model has one (``closed_form().batch_log_evidence``),
else Laplace importance sampling (``modelcompare.estimators.references.laplace_importance``), else,
where the Laplace proposal fits badly (Pareto k̂ ≥ 0.7) or its Newton search fails, full-data AIS.
The two agree when |Δ| ≤ z·√(se₁² + se₂²) at the one-statistic threshold (``critical_z(1)``), each
se the method's own standard error (0 for the closed form).
"""

from __future__ import annotations

import math

import torch

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.references.ais import AISSettings, run_ais
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, run_laplace_is
from modelcompare.estimators.tracker import OnlineEvidence
from modelcompare.models.base import Model
from modelcompare.models.conformance.findings import Violation, critical_z

TRUSTED_PARETO_K = 0.7  # Vehtari et al. 2024: above it the weights' standard error misleads
REFERENCE_PARTICLES = 256  # full-data AIS where the Laplace proposal fails


def particles_for(model: Model) -> int:
    """Four particles per parameter and one (docs/guide/writing-models.md), 64 to 1024."""
    return min(1024, max(64, 4 * (model.param_dim + 1)))


def streamed(model: Model, rows: Rows, seed: int) -> OnlineEvidence:
    """SG-AIS over ``rows`` in two chunks."""
    tracker = OnlineEvidence(model, particles=particles_for(model), seed=seed)
    for chunk in halves(rows):
        tracker.update(chunk.x, chunk.y)
    return tracker


def halves(rows: Rows) -> tuple[Rows, Rows]:
    return rows.slice(0, rows.count // 2), rows.slice(rows.count // 2, rows.count)


def check_state_round_trip(model: Model, rows: Rows, seed: int) -> str:
    """save → load gives the same state, and both then take the next chunk to the same bits."""
    first, second = halves(rows)
    settings = {"particles": particles_for(model), "seed": seed}
    tracker = OnlineEvidence(model, **settings)
    tracker.update(first.x, first.y)
    resumed = OnlineEvidence(type(model)(**model.config()), **settings)
    resumed.load(tracker.save())
    if resumed.state_bytes() != tracker.state_bytes():
        raise Violation("a state saved and loaded differs from the original: keep everything "
                        "the model needs in config(), and nothing in the model that changes")
    tracker.update(second.x, second.y)
    resumed.update(second.x, second.y)
    if resumed.state_bytes() != tracker.state_bytes():
        raise Violation(
            "two trackers in one state, given one chunk, reached different states: the model's "
            "functions must depend only on their arguments (draw only from the generator passed "
            "to sample_prior, keep no caches or counters between calls)")
    return (f"{settings['particles']} particles over two chunks of {first.count} rows: saved, "
            "loaded and continued bit for bit")


def check_evidence(model: Model, rows: Rows, generator: torch.Generator, seed: int) -> str:
    tracker = streamed(model, rows, seed)
    estimate, error = tracker.log_evidence, tracker.log_evidence_stderr
    reference, reference_error, name = reference_evidence(model, rows, generator)
    spread = math.sqrt(error**2 + reference_error**2)
    limit = critical_z(1)
    summary = (f"SG-AIS ({particles_for(model)} particles) reads log Z = {estimate:.3f} ± "
               f"{error:.3f} on {rows.count} rows, {name} {reference:.3f} ± {reference_error:.3f}")
    if abs(estimate - reference) <= limit * spread:
        return f"{summary} (|z| ≤ {limit:.2f})"
    z = (estimate - reference) / spread if spread > 0 else math.inf
    if name == "the closed form":
        cause = ("closed_form() and the sampling methods describe different models: check "
                 "batch_log_evidence against log_prior and log_likelihood (the same prior "
                 "scales and noise), or the prior checks above")
    else:
        cause = ("most often sample_prior does not draw from exp(log_prior), or a prepared sum "
                 "(weighted_sum, stepwise_sums) computes another likelihood than "
                 "log_likelihood: see the checks above. A posterior with several separated "
                 "modes can also defeat both; try more particles before suspecting the model")
    raise Violation(f"{summary}: z = {z:.1f}. The model and its estimates disagree: {cause}.")


def reference_evidence(model: Model, rows: Rows, generator: torch.Generator
                       ) -> tuple[float, float, str]:
    """log Z of ``rows``, its standard error, and the name of the method."""
    oracle = model.closed_form()
    if oracle is not None:
        return float(oracle.batch_log_evidence(rows.x, rows.y)), 0.0, "the closed form"
    try:
        laplace = run_laplace_is(model, rows, LaplaceISSettings(), generator)
    except EstimatorError:
        laplace = None
    if laplace is not None and laplace.pareto_k < TRUSTED_PARETO_K:
        evidence = laplace.evidence
        return evidence.log_evidence, evidence.log_evidence_stderr, "Laplace importance sampling"
    ais = run_ais(model, rows, AISSettings(particles=REFERENCE_PARTICLES), generator)
    return ais.log_evidence, ais.log_evidence_stderr, "full-data AIS"
