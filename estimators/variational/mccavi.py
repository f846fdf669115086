"""MC-CAVI: coordinate-ascent variational inference with Monte Carlo expectations.

Ye, Beskos, De Iorio & Hao (2020), "Monte Carlo co-ordinate ascent variational inference". CAVI
sets each factor to q_j ∝ exp(E_{q_−j}[log p(data, θ)]) in turn (Bishop, PRML eq. 10.9); the
expectations E_{q_j}[f(θ_j)] that the other factors' updates need are estimated by short MCMC runs
on q_j (Metropolis-corrected HMC, chains warm-started from the previous iteration), and the Monte
Carlo size (number of chains) doubles each time the iterates stabilise (change within the
tolerance or within Monte Carlo error), up to ``max_draws``.

The ELBO is then evaluated in closed form at the final q. Any q gives a lower bound on log Z, so
Monte Carlo noise in the updates can only make the bound looser, never invalid.

This module is the Monte Carlo and the iteration; the factor updates, densities and the ELBO
are the family's (``Model.mean_field()``: the Gaussian mixture and linear regression with unknown
noise have one).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from pydantic import Field, model_validator
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.moves.hmc import HMCParams, hmc_chain
from modelcompare.estimators.settings import Settings
from modelcompare.models import Model
from modelcompare.models.mean_field import LogDensity


class MCCAVISettings(Settings):
    initial_draws: int = Field(
        16, ge=2, le=4096, description="MCMC chains (Monte Carlo size) at the first iteration"
    )
    max_draws: int = Field(512, ge=2, le=65_536, description="the Monte Carlo size stops here")
    transitions: int = Field(
        3, ge=1, le=100, description="HMC transitions per factor per iteration (warm chains)"
    )
    leapfrog_steps: int = Field(8, ge=1, le=100, description="leapfrog steps per transition")
    step_size: float = Field(
        0.5, gt=0.0, le=2.0, description="leapfrog step in units of the factor's Laplace sd"
    )
    tolerance: float = Field(
        1e-3, gt=0.0, le=1.0, description="relative change under which iterates count as stable"
    )
    max_iterations: int = Field(200, ge=1, le=10_000, description="coordinate-ascent sweeps")

    @model_validator(mode="after")
    def _max_at_least_initial(self) -> MCCAVISettings:
        if self.max_draws < self.initial_draws:
            raise ValueError(
                f"max_draws must be at least initial_draws ({self.initial_draws}), "
                f"got {self.max_draws}"
            )
        return self


class MCCAVIResult(NamedTuple):
    elbo: float  # the evidence lower bound at the final q (closed form)
    iterations: int
    draws: int  # Monte Carlo size (chains) at the last iteration
    converged: bool  # stable at the largest Monte Carlo size before max_iterations
    acceptance_rate: float  # mean HMC acceptance over the run


def next_draw_size(
    draws: int, change: float, noise: float, settings: MCCAVISettings
) -> tuple[int, bool]:
    """(Monte Carlo size, converged) after an iteration whose monitored expectation moved by the
    relative ``change``, with relative Monte Carlo standard error ``noise``. Stable means a change
    within max(tolerance, 2·noise): the size doubles then, and stability at ``max_draws`` ends
    the run."""
    if change >= max(settings.tolerance, 2.0 * noise):
        return draws, False
    if draws >= settings.max_draws:
        return draws, True
    return min(2 * draws, settings.max_draws), False


def has_elbo(model: Model) -> bool:
    return model.mean_field() is not None


def mccavi_elbo(
    model: Model,
    rows: Rows,
    generator: torch.Generator,
    settings: MCCAVISettings | None = None,
) -> MCCAVIResult:
    """MC-CAVI on the model's view of ``rows`` (computed on the generator's device);
    ``TypeError`` for families without a scheme."""
    scheme = model.mean_field()
    if scheme is None:
        raise TypeError(f"no MC-CAVI lower bound for {model.family}")
    settings = settings or MCCAVISettings()
    rows = rows.to(generator.device)
    acceptance: list[float] = []

    def sample(chains: Tensor, log_q: LogDensity, scale: Tensor) -> Tensor:
        """``transitions`` HMC transitions of warm-started chains (one per draw) on ``log_q``."""
        params = HMCParams(settings.step_size, settings.leapfrog_steps, settings.transitions)
        chains, rates = hmc_chain(chains, log_q, scale, params, generator)
        acceptance.append(sum(rates) / len(rates))
        return chains

    draws, converged, iterations = settings.initial_draws, False, 0
    state = scheme.start(rows.x, rows.y, draws, generator)
    while iterations < settings.max_iterations and not converged:
        iterations += 1
        state, change, noise = scheme.sweep(state, sample)
        draws, converged = next_draw_size(draws, change, noise, settings)
        state = scheme.resize(state, draws)
    return MCCAVIResult(
        elbo=scheme.elbo(state),
        iterations=iterations,
        draws=draws,
        converged=converged,
        acceptance_rate=sum(acceptance) / len(acceptance),
    )
