"""Nested sampling (Skilling 2006) with constrained moves by reflective HMC, removing k points
per iteration (parallel nested sampling).

Each iteration removes the k lowest-likelihood of n live points. The prior mass X inside the
contour shrinks by t_j ~ Beta(n − j, 1) for the j-th of them (j = 0..k−1: after j removals the
n − j survivors are still uniform in X), so E[log X] drops by Σ_{j<k} 1/(n − j) and dead point j
carries prior mass X_{j−1} − X_j at likelihood L_j. New points start from copies of random
survivors and move on the prior restricted to L > L* (``nested_moves``). The run stops once the
live points cannot add more than ``stop_fraction`` of Ẑ: max L_live · X < stop_fraction · Ẑ;
the live points then close the sum with mass X/n each. The standard error is the spread of
log Z over simulated shrinkages (``_shrinkage_stderr``), the run-specific form of √(H/n); it
ignores any correlation the constrained moves leave between new points and their starts.

Mixture models: the prior is symmetric under relabelling the components, so the posterior has
K! symmetric modes. Nested sampling needs no special care (it integrates over the prior, and
the live points populate every mode they reach); its posterior samples mix labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from pydantic import Field, model_validator
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.deadline import Deadline, check_deadline
from modelcompare.estimators.errors import EstimatorError, Progress
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.moves.constrained import Contour, MoveReport, reflective_hmc, rejection
from modelcompare.estimators.moves.hmc import HMCParams
from modelcompare.estimators.references.batch import (
    BatchEvidence,
    BatchState,
    Rerun,
    RerunInfo,
    checked,
    full_log_likelihood,
    full_log_likelihood_and_grad,
    rerun_estimator,
)
from modelcompare.estimators.settings import Advanced, Settings
from modelcompare.estimators.smc.covariance import particle_scale
from modelcompare.estimators.smc.weights import log_normalize
from modelcompare.models import Model

# (live θ, live log L, threshold L*, how many, generator) -> (new θ, new log L)
Replace = Callable[[Tensor, Tensor, float, int, torch.Generator], tuple[Tensor, Tensor]]


class NestedSettings(Settings):
    """``nested``: nested sampling with reflective-HMC constrained moves, re-run per update."""

    live_points: int = Field(256, ge=2, le=4096, description="nested-sampling live points")
    parallel: Advanced[int] = Field(
        16, ge=1, le=1024, description="k: points removed and walkers evolved per iteration"
    )
    stop_fraction: Advanced[float] = Field(
        0.01,
        gt=0.0,
        le=1.0,
        description="stop once the live points' bound on the rest is below this · Ẑ",
    )
    hmc_step: Advanced[float] = Field(
        0.3,
        gt=0.0,
        le=10.0,
        description="leapfrog step in units of the live points' spread (jittered ±50%)",
    )
    leapfrog_steps: Advanced[int] = Field(
        10, ge=1, le=100, description="leapfrog steps of each constrained trajectory"
    )
    # Several short trajectories decorrelate better than one long one: a billiard in a
    # near-spherical contour nearly conserves angular momentum, so one trajectory keeps its
    # distance from the centre.
    trajectories: Advanced[int] = Field(
        3, ge=1, le=50, description="constrained trajectories (fresh momentum each) per new point"
    )
    max_iterations: Advanced[int] = Field(
        1_000_000,
        ge=1,
        le=10_000_000,
        description="dead points per run; more raise EstimatorError (a safeguard)",
    )

    @model_validator(mode="after")
    def _fewer_walkers_than_live_points(self) -> NestedSettings:
        if self.parallel >= self.live_points:
            raise ValueError(
                f"parallel must be below live_points ({self.live_points}), got {self.parallel}"
            )
        return self

    @property
    def hmc(self) -> HMCParams:
        return HMCParams(self.hmc_step, self.leapfrog_steps, self.trajectories)


class NestedLoop(NamedTuple):
    """What one nested-sampling run needs besides the model and the generator."""

    log_lik: Callable[[Tensor], Tensor]  # θ (k, D) -> full-data log L (k,), checked
    replace: Replace  # new live points inside the contour
    live_points: int  # n
    parallel: int  # k
    stop_fraction: float
    max_iterations: int


def run_nested(
    model: Model,
    rows: Rows,
    settings: NestedSettings,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> BatchEvidence:
    """log p(rows) by nested sampling with reflective-HMC constrained moves."""
    report = MoveReport()

    def log_lik(theta: Tensor) -> Tensor:
        return checked(full_log_likelihood(model, theta, rows))

    # A trajectory can land where the model overflows (a mixture variance e^s at s ≪ 0):
    # a NaN log-likelihood there counts as outside the contour, so the walker reflects.
    def move_log_lik(theta: Tensor) -> Tensor:
        return torch.nan_to_num(full_log_likelihood(model, theta, rows), nan=-math.inf)

    def move_log_lik_and_grad(theta: Tensor) -> tuple[Tensor, Tensor]:
        value, grad = full_log_likelihood_and_grad(model, theta, rows)
        return torch.nan_to_num(value, nan=-math.inf), grad

    def replace(
        live: Tensor, live_ll: Tensor, threshold: float, count: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        # Survivors are the live points above L*; the live-point covariance shapes the metric.
        uniform = torch.zeros(live.shape[0], dtype=live.dtype, device=live.device)
        scale = particle_scale(live, uniform)
        pick = _starting_points(live.shape[0], count, generator)
        theta, theta_ll = live[pick], live_ll[pick]
        contour = Contour(model, threshold, move_log_lik, move_log_lik_and_grad)
        for _ in range(settings.trajectories):
            theta, theta_ll = reflective_hmc(
                contour, theta, theta_ll, scale, settings.hmc, generator, report
            )
        return theta, theta_ll

    loop = NestedLoop(
        log_lik,
        replace,
        settings.live_points,
        settings.parallel,
        settings.stop_fraction,
        settings.max_iterations,
    )
    return _nested_loop(model, loop, generator, report, deadline)


def run_rejection_nested(
    model: Model,
    rows: Rows,
    live_points: int,
    generator: torch.Generator,
    stop_fraction: float = 0.01,
) -> BatchEvidence:
    """Nested sampling whose new points are exact prior draws by rejection: its only errors are
    the statistical ones √(H/n) describes. Tiny data only (the cost grows like 1/X)."""
    report = MoveReport()

    def log_lik(theta: Tensor) -> Tensor:
        return checked(full_log_likelihood(model, theta, rows))

    def replace(
        live: Tensor, live_ll: Tensor, threshold: float, count: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        return rejection(Contour(model, threshold, log_lik, _no_gradient), count, generator, report)

    loop = NestedLoop(log_lik, replace, live_points, 1, stop_fraction, 10_000_000)
    return _nested_loop(model, loop, generator, report, None)


def _no_gradient(theta: Tensor) -> tuple[Tensor, Tensor]:
    raise TypeError("rejection sampling needs no gradient")


def _starting_points(live: int, count: int, generator: torch.Generator) -> Tensor:
    """Indices of ``count`` distinct random survivors out of ``live``; repeats only when there
    are fewer survivors than walkers."""
    device = generator.device
    if count <= live:
        return torch.randperm(live, generator=generator, device=device)[:count]
    return torch.randint(0, live, (count,), generator=generator, device=device)


def _nested_loop(
    model: Model,
    loop: NestedLoop,
    generator: torch.Generator,
    report: MoveReport,
    deadline: Deadline | None,
) -> BatchEvidence:
    n, k = loop.live_points, loop.parallel
    live = model.sample_prior(n, generator)
    device = live.device
    live_ll = loop.log_lik(live)
    report.evaluations += n
    # log(1 − e^{−1/(n−j)}): the share of X_{j−1} that dead point j of an iteration carries.
    shrink = torch.tensor([1.0 / (n - j) for j in range(k)], dtype=torch.float64, device=device)
    log_x_after = -torch.cumsum(shrink, 0)  # log X_j − log X_before, j = 0..k−1
    log_share = torch.log(-torch.expm1(-shrink))
    dead_points: list[Tensor] = []
    dead_ll: list[Tensor] = []
    dead_log_mass: list[Tensor] = []
    log_x, log_z, dead = 0.0, -math.inf, 0
    before = torch.zeros(1, dtype=torch.float64, device=device)
    while True:
        if float(live_ll.max()) + log_x < log_z + math.log(loop.stop_fraction):
            break
        check_deadline(deadline, Progress(0, None, dead))
        if dead >= loop.max_iterations:
            raise EstimatorError(
                f"nested sampling did not converge in {dead} iterations (log X = {log_x:.3g})"
            )
        order = torch.argsort(live_ll)
        live, live_ll = live[order], live_ll[order]
        threshold = float(live_ll[k - 1])
        mass = log_x + torch.cat([before, log_x_after[:-1]])
        mass = mass + log_share
        dead_points.append(live[:k])
        dead_ll.append(live_ll[:k])
        dead_log_mass.append(mass)
        added = torch.logsumexp(mass + live_ll[:k], 0)
        log_z = float(torch.logaddexp(torch.tensor(log_z, dtype=added.dtype, device=device), added))
        log_x += float(log_x_after[-1])
        dead += k
        survivors, survivors_ll = live[k:], live_ll[k:]
        fresh, fresh_ll = loop.replace(survivors, survivors_ll, threshold, k, generator)
        live = torch.cat([survivors, fresh])
        live_ll = torch.cat([survivors_ll, fresh_ll])
    # The live points close the sum, each with prior mass X / n.
    points = torch.cat([*dead_points, live])
    log_l = torch.cat([*dead_ll, live_ll])
    closing = torch.full((n,), log_x - math.log(n), dtype=torch.float64, device=device)
    log_mass = torch.cat([*dead_log_mass, closing])
    log_posterior = log_mass + log_l
    log_evidence = float(torch.logsumexp(log_posterior, 0))
    return BatchEvidence(
        log_evidence=log_evidence,
        log_evidence_stderr=_shrinkage_stderr(torch.cat(dead_ll), live_ll, n, k, generator),
        iterations=dead,
        likelihood_evaluations=report.evaluations,
        particles=points,
        log_weights=log_normalize(log_posterior),
        acceptance_rate=report.acceptance_rate,
    )


def _shrinkage_stderr(
    dead_ll: Tensor, live_ll: Tensor, n: int, k: int, generator: torch.Generator, draws: int = 128
) -> float:
    """Spread of log Z over simulated shrinkage sequences (Skilling 2006, sec. 9; dynesty's
    ``jitter_run``): t ~ Beta(n − j, 1), i.e. log t = log U / (n − j), for the j-th removal of
    each iteration: Skilling's √(H/n) error, made specific to this run's likelihoods and to k
    removals per iteration (calibration figures in benchmarks/README.md, "Measurements behind
    choices in the code")."""
    count, device = dead_ll.shape[0], dead_ll.device
    within = torch.arange(count, device=device) % k
    uniforms = torch.rand(draws, count, generator=generator, dtype=torch.float64, device=device)
    log_t = torch.log(uniforms) / (n - within).to(torch.float64)
    log_x = torch.cumsum(log_t, 1)
    start = torch.zeros(draws, 1, dtype=torch.float64, device=device)
    log_x_before = torch.cat([start, log_x[:, :-1]], 1)
    log_mass = log_x_before + torch.log(-torch.expm1(log_t))
    dead_part = torch.logsumexp(log_mass + dead_ll, 1)
    live_part = log_x[:, -1] - math.log(n) + torch.logsumexp(live_ll, 0)
    return float(torch.logaddexp(dead_part, live_part).std())


def bind(model: Model, settings: NestedSettings) -> Estimator[BatchState, RerunInfo]:
    """Every update re-runs ``run_nested`` on all rows; the state keeps ``live_points``
    equal-weight posterior samples."""
    return rerun_estimator("nested", Rerun(model, settings, run_nested, settings.live_points))
