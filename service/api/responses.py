"""Response bodies as the OpenAPI document declares them. Fields may be added, never renamed
(DESIGN.md), so every body allows more properties than it lists; the listed ones are typed, and
the evidence body lists every field it has (tests/service/api/test_evidence_schema.py). A number
the estimators cannot give (not yet computed, or not finite) is null."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from modelcompare.service.api.body import Body
from modelcompare.service.api.rule_responses import RuleOut


class Target(Body):
    kind: Literal["real", "count", "label"] = Field(
        description="real: any finite number; count: a non-negative integer; label: an "
        "integer class label in [0, classes)")
    classes: int | None = Field(description="labels only: how many classes")


STATUS = ("ok; degraded: halted on a dead-lettered chunk, or chunks were skipped (wins over "
          "waiting); waiting: chunks are queued and the worker that last looked cannot build a "
          "model (its family's plugin is not installed there, or its version cannot continue "
          "the comparison), so they wait for one that can; status_reason says which")


class ModelOut(Body):
    name: str
    family: str
    package: str | None = Field(description="the package that provided the family when the "
                                "model was added (null: recorded before packages were)")
    version: str | None = Field(description="that package's version; a worker continues the "
                                "model with the same major version, not older")
    target: Target | None = Field(description="the values y may take; null: no target")
    config: dict[str, Any] = Field(description="the family's settings, defaults filled in")
    columns: list[int] = Field(description="the columns of x the model reads (for a model by "
                               "formula, indices into the comparison's design)")
    formula: str | None = Field(None, description="the model's formula over named columns; "
                                "null: it reads columns of x by index")
    prior_probability: float
    warnings: list[str] = Field(
        default_factory=list, description="what to keep in mind when reading this model's "
        "evidence, e.g. more parameters than the estimator is checked to serve (empty: none)")


class ComparisonOut(Body):
    id: str
    name: str
    seed: int
    created_at: float = Field(description="Unix time")
    x_dim: int = Field(description="numbers per row of x")
    has_y: bool = Field(description="whether chunks carry y")
    estimator: dict[str, Any] = Field(description="method and settings")
    models: list[ModelOut]
    variables: list[str] | None = Field(
        None, description="the named input columns every chunk carries (besides "
        "target_column), first seen over the models' formulas; null: chunks are matrices x")
    target_column: str | None = Field(
        None, description="the column a chunk's target y is read from (the left side of the "
        "formulas); null for a matrix comparison, or when no model has a target")
    design: list[str] | None = Field(
        None, description="the names of the x_dim stored design columns, made from variables "
        "by the formulas (e.g. bmi, bmi:bp, C(sex, levels=[1, 2])[T.2]; never the intercept); "
        "fixed at creation: a model added later reads only these")
    design_formulas: list[str] | None = Field(
        None, description="the formulas the comparison was created with: they make the design "
        "columns (a client that computes them, such as the CLI, needs them even after a model "
        "is removed)")
    version: int
    sequence: int = Field(description="chunks applied")
    ingested: int = Field(description="chunks accepted")
    status: Literal["ok", "degraded", "waiting"] = Field(description=STATUS)
    status_reason: str | None
    rules: list[RuleOut] = Field(
        default_factory=list, description="the decision rules; where each stands: GET …/rules")


class FamilyOut(Body):
    family: str
    package: str = Field(description="the installed package (distribution) that provides it")
    version: str
    description: str
    config_schema: dict[str, Any] = Field(description="JSON schema of the model's ``config``")


class FamilyList(Body):
    families: list[FamilyOut] = Field(description="by name")
    unavailable: dict[str, str] = Field(
        description="plugin families that failed to load here, with why")


class ComparisonList(Body):
    comparisons: list[ComparisonOut] = Field(description="one page, newest first")
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; null at the end of the listing")


class WindowEvidence(Body):
    rows: int = Field(description="rows the window spans (at least evidence_window_rows once seen)")
    log_evidence: float | None = Field(description="log p(last rows | earlier rows)")
    log_evidence_stderr: float | None
    log_bayes_factor: float | None = Field(
        description="windowed log Z minus the best model's; null while not comparable"
    )
    log_bayes_factor_stderr: float | None
    best: str | None = Field(description="the model with the largest windowed log Z")


class Reliability(Body):
    reliable: bool = Field(
        description="false for good once an update's SGHMC moves diverged past "
        "MODELCOMPARE_DIVERGED_WARNING_FRACTION or its particles collapsed (frozen_at) or "
        "spread far wider than the posterior (wide_at): log Z may then be off by more than its "
        "stderr"
    )
    reason: str | None = Field(description="why not reliable, or null")
    max_diverged_fraction: float = Field(
        description="the largest fraction of one update's SGHMC trajectories undone as diverged"
    )
    diverged_updates: int = Field(description="updates whose fraction exceeded the threshold")
    first_diverged_at: int | None = Field(description="rows seen after the first such update")
    frozen_at: int | None = Field(
        None,  # bodies stored before the field existed lack it
        description="rows seen after the first update whose particles had collapsed (info.spread "
        "below 1e-4): log Z may then be off by more than its stderr"
    )
    wide_at: int | None = Field(
        None,  # bodies stored before the field existed lack it
        description="rows seen after the first update whose particles had spread far wider "
        "than the posterior (info.spread above 4): log Z may then be off by more than its stderr"
    )


class ModelEvidence(Body):
    name: str
    family: str
    log_evidence: float | None = Field(description="running log Z of the rows seen")
    log_evidence_stderr: float | None = Field(description="standard error of log_evidence")
    n_observations: int = Field(description="rows this model has absorbed")
    sequence: int = Field(
        description="chunks this model has taken (behind the comparison's while catching up)")
    ess: float | None = Field(description="effective sample size of the particles")
    elbo: float | None = Field(
        description="MC-CAVI lower bound on log Z of the first elbo_n_observations rows, where "
        "the family has one (refreshed each time the rows seen pass a power of two); else null")
    elbo_n_observations: int = Field(description="rows the elbo was computed on (0: none yet)")
    catching_up: bool = Field(description="added mid-stream and still replaying the history")
    failed: str | None = Field(
        description="why this model stopped updating (a chunk it failed on every attempt, or "
        "its catch-up replay failed; docs/guide/reliability.md, 'Poison chunks'), or null"
    )
    prior_probability: float
    posterior_probability: float | None = Field(
        description="null while catching up (not comparable yet) or once failed"
    )
    info: dict[str, Any] | None = Field(
        description="the estimator's diagnostics of its last update, as its Info record names "
        "them (e.g. annealing_steps, diverged_fraction, reestimated); null before the first")
    window: WindowEvidence | None = Field(
        description="windowed evidence of the last rows; null before the first chunk and after "
        "a re-estimate of log Z (info.reestimated), until the next chunk"
    )
    reliability: Reliability


class LastError(Body):
    sequence: int = Field(description="the chunk given up on")
    message: str = Field(description="why: its last error, or that the operator skipped it")


class Evidence(Body):
    id: str
    version: int = Field(description="rises with every commit")
    sequence: int = Field(description="chunks applied")
    n_observations: int
    models: list[ModelEvidence]
    last_error: LastError | None = Field(description="the last chunk given up on, or null")
    compute_seconds: float | None = Field(
        description="estimator time of the step that made this version; null for a version "
        "that applied no chunk")
    status: Literal["ok", "degraded", "waiting"] = Field(description=STATUS)
    status_reason: str | None
    skipped_chunks: int = Field(description="dead-lettered chunks left out of the evidence")
    halted_at: int | None = Field(description="sequence of the dead-lettered chunk halting it")



class ChunkAccepted(Body):
    sequence: int = Field(description="the chunk's sequence number")
    rows: int
    duplicate: bool = Field(description="this Idempotency-Key was already ingested")
    processed: bool | None = Field(
        default=None,
        description="?wait=true only: false when not applied within wait_timeout or halted",
    )
    status: Literal["ok", "degraded"] | None = Field(default=None, description="when halted")
    status_reason: str | None = Field(default=None, description="when halted")


class ModelAdded(Body):
    model: str
    catching_up: bool = Field(description="true while it replays the stored history")
    evidence: Evidence


class ModelRemoved(Body):
    model: str
    evidence: Evidence = Field(description="the evidence without the model: the probabilities "
                               "and Bayes factors of the models that remain")


class Weights(Body):
    weights: dict[str, float | None] = Field(description="posterior model probabilities")
    version: int
    sequence: int


class Series(Body):
    sequence: list[int]
    n_observations: list[int]
    log_evidence: list[float | None]
    log_evidence_stderr: list[float | None]


class History(Body):
    models: dict[str, Series] = Field(description="per model, one point per applied chunk")
    points: list[dict[str, Any]]


class PredictiveSummary(Body):
    mean: list[float] | None = None
    variance: list[float] | None = None
    probabilities: list[list[float]] | None = None
    log_density: list[float] | None = None


class ModelPrediction(PredictiveSummary):
    name: str
    posterior_probability: float | None
    error: str | None = Field(default=None, description="why this model could not predict")


class Prediction(Body):
    version: int
    mixture: PredictiveSummary | None = Field(description="the Bayesian model average")
    models: list[ModelPrediction]


class ExpectationOut(Body):
    model: str
    functional: Literal["mean", "second_moment", "predictive"]
    estimate: list[float]
    stderr: list[float]
    repetitions: int
    alpha: float
    n_observations: int
    rows_used: int
    sequence: int


class DeadLetterList(Body):
    halted_at: int | None
    policy: Literal["halt", "skip"]
    max_attempts: int
    dead_letters: list[dict[str, Any]]


class Status(Body):
    status: str


def returns(model: type[BaseModel]) -> dict[str, Any]:
    """Route arguments: answer with ``model``, validated, keys as the handler gave them (an
    optional field the handler left out stays out)."""
    return {"response_model": model, "response_model_exclude_unset": True}
