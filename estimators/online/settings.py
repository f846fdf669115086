"""Settings of the online methods, one record per method, assembled from groups of settings
(``modelcompare.estimators.settings`` has the groups the references share).

Each group is the settings of one part: the particle cloud, the exact (full-batch HMC) phase,
the past data read in minibatches, the SGHMC moves, the annealing ladder. The parts take their
parameters as small records (``hmc``, ``sghmc``), never as loose arguments.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from modelcompare.estimators.moves.sghmc import SGHMCParams
from modelcompare.estimators.online.restart import Restart
from modelcompare.estimators.online.surprise import Surprise
from modelcompare.estimators.references.nested import NestedSettings
from modelcompare.estimators.settings import (
    Advanced,
    HMCSettings,
    LadderSettings,
    ParticleSettings,
    Settings,
)


class ExactPhaseSettings(HMCSettings):
    full_batch_rows: int = Field(
        500,
        ge=0,
        le=2000,
        description="exact, Metropolis-corrected HMC moves on the full past while n ≤ this",
    )
    gradient_dtype: Advanced[Literal["float32", "float64"]] = Field(
        "float32",
        description="arithmetic of the moves' likelihood gradients (exact HMC's leapfrog, plain "
        "SGHMC and its noise estimate): float32 about halves their cost; Metropolis tests, "
        "log-likelihoods, weights and the state stay float64",
    )

    @property
    def gradient_precision(self) -> torch.dtype:
        return getattr(torch, self.gradient_dtype)


class PastDataSettings(Settings):
    batch_size: int = Field(
        100, ge=1, le=4096, description="minibatch size drawn with replacement from the past"
    )
    control_variates: Advanced[bool] = Field(
        True,
        description="minibatch gradients anchored at the weighted particle mean (false: plain "
        "minibatch gradients, whose noise biases log Z by tens of nats on softmax regression)",
    )
    anchor_growth: Advanced[float] = Field(
        1.02,
        gt=1.0,
        le=10.0,
        description="re-anchor once n has grown by this factor since the last anchor",
    )
    anchor_drift: Advanced[float] = Field(
        1.0,
        gt=0.0,
        le=1000.0,
        description="re-anchor at once when the particle mean is this many posterior SDs "
        "from the anchor",
    )


class SGHMCSettings(Settings):
    steps: Advanced[int] = Field(
        20, ge=1, le=200, description="SGHMC steps per move (one move per annealing step)"
    )
    lr: Advanced[float] = Field(
        0.025,
        gt=0.0,
        le=10.0,
        description="SGHMC learning rate: η = lr / n (identity) or lr in the particle metric",
    )
    friction: Advanced[float] = Field(
        0.1, gt=0.0, le=1.0, description="SGHMC momentum decay α per step"
    )
    preconditioner: Advanced[Literal["identity", "particles"]] = Field(
        "particles",
        description="SGHMC mass: inverse mass = weighted particle covariance, or identity",
    )
    mh_correction: Advanced[Literal["none", "barker"]] = Field(
        "none",
        description="barker: accept or reject each SGHMC trajectory by the minibatch Barker test",
    )
    noise_friction: Advanced[bool] = Field(
        True, description="raise SGHMC's friction by its estimated minibatch-gradient noise"
    )

    piece_batch_size: Advanced[int] = Field(
        100,
        ge=1,
        le=4096,
        description="rows of the piece being annealed in that each SGHMC gradient reads, drawn "
        "with replacement (the piece in full when it has no more)",
    )

    @property
    def sghmc(self) -> SGHMCParams:
        return SGHMCParams(
            self.lr,
            self.friction,
            self.steps,
            self.preconditioner,
            self.noise_friction,
            self.piece_batch_size,
        )


class AnnealingSettings(LadderSettings):
    @property
    def surprise(self) -> Surprise:
        return Surprise(self.surprise_steps, self.surprise_ess, self.surprise_moves)

    @property
    def restart(self) -> Restart | None:
        if self.restart_growth == 0.0:
            return None
        return Restart(self.restart_growth, self.restart_min_rows, self.restart_max_rows)

    @model_validator(mode="after")
    def _restart_growth_bounds_the_cost(self) -> AnnealingSettings:
        # all re-estimates together cost growth / (growth − 1) times the rows of the last
        if 0.0 < self.restart_growth < 1.5:
            raise ValueError(f"restart_growth must be 0 or at least 1.5, got {self.restart_growth}")
        return self

    resampling: Advanced[Literal["systematic", "stratified", "residual", "multinomial"]] = Field(
        "systematic", description="resampling scheme"
    )
    max_annealing_steps: Advanced[int] = Field(
        1000,
        ge=1,
        le=10_000,
        description="annealing steps per piece; more raise EstimatorError (a safeguard)",
    )
    surprise_steps: Advanced[int] = Field(
        8,
        ge=1,
        le=10_000,
        description="a piece annealed in more steps than this is surprising: re-anchor and "
        "make surprise_moves more moves",
    )
    surprise_ess: Advanced[float] = Field(
        0.1, ge=0.0, le=1.0, description="a piece whose ESS / M fell below this is surprising"
    )
    surprise_moves: Advanced[int] = Field(
        5, ge=0, le=100, description="extra moves at λ = 1 after a surprising piece (0: none)"
    )
    restart_growth: float = Field(
        2.0,
        ge=0.0,
        le=100.0,
        description="once a chunk after the exact phase has left the particle system broken "
        "(over 10% of its SGHMC trajectories diverged, or its cloud frozen), re-estimate log Z "
        "from the prior over every row seen, shuffled, at the first chunk where n is at least "
        "this many times the rows of the last re-estimate (0: never; else at least 1.5): each "
        "costs what the rows seen cost",
    )
    restart_min_rows: Advanced[int] = Field(
        1000, ge=0, le=10**9, description="no re-estimate before n reaches this"
    )
    restart_max_rows: Advanced[int] = Field(
        20_000,
        ge=0,
        le=10**9,
        description="no re-estimate once n is past this (the pass runs inside one update)",
    )
    standard_error: Advanced[Literal["genealogy", "delta"]] = Field(
        "genealogy",
        description="log Z's stderr: from the particles' Eve groups per piece (across the "
        "selection back to M particles that ends a widened piece), or the sum of per-step "
        "delta-method variances",
    )


class SequentialSettings(SGHMCSettings, PastDataSettings, ExactPhaseSettings, ParticleSettings):
    """``sequential``: one plain predictive average per piece, then SGHMC moves."""


class SGAISSettings(AnnealingSettings, SequentialSettings):
    """``sgais``: ESS-adaptive annealing, resampling, SGHMC moves (exact HMC while n is small)."""

    surprise_ess_target: Advanced[float] = Field(
        0.98,
        gt=0.0,
        le=0.99,
        description="ESS target of a piece's annealing steps past surprise_steps (after the "
        "exact phase)",
    )
    increment_control: Advanced[Literal["score", "none"]] = Field(
        "score",
        description="score: the first annealing step of each piece corrected by control variates, "
        "the score of the past's posterior at each particle (two more minibatch gradients per "
        "piece), where particles ≥ 4 × (parameters + 1); none: plain increments",
    )
    surprise_move_steps: Advanced[int] = Field(
        60, ge=1, le=200, description="SGHMC steps per move in a piece's steps past surprise_steps"
    )
    surprise_particles: Advanced[int] = Field(
        4,
        ge=1,
        le=16,
        description="a piece's steps past surprise_steps run with this many times the particles "
        "(resampled up at the first of them, back down at the piece's end)",
    )
    islands: int = Field(
        1,
        ge=1,
        le=16,
        description="independent particle systems of `particles` each, their Ẑ averaged, at this "
        "many times the cost: an error bar that narrows as fast as the error, where more "
        "particles in one system narrow it faster (drifting streams)",
    )

    @property
    def careful(self) -> SGAISSettings:
        """These settings with the ladder and moves of a long piece (``piece_parts``)."""
        return self.model_copy(
            update={"ess_target": self.surprise_ess_target, "steps": self.surprise_move_steps}
        )


class MinibatchMHSettings(
    AnnealingSettings, PastDataSettings, ExactPhaseSettings, ParticleSettings
):
    """``minibatch_mh``: SG-AIS whose minibatch moves are random-walk Metropolis steps accepted
    by the minibatch Barker test."""

    steps: Advanced[int] = Field(
        20, ge=1, le=200, description="random-walk MH steps per move (one move per annealing step)"
    )


class HybridSettings(SGAISSettings):
    """``hybrid``: nested sampling on the first ``nested_rows`` rows, SG-AIS after."""

    nested_rows: int = Field(
        100, ge=1, le=1000, description="rows absorbed by nested sampling before SG-AIS"
    )
    live_points: int = Field(256, ge=2, le=4096, description="nested-sampling live points")
    nested_parallel: Advanced[int] = Field(
        16, ge=1, le=1024, description="points the nested run replaces per iteration"
    )
    islands: Advanced[int] = Field(1, ge=1, le=1, description="hybrid runs one particle system")

    @model_validator(mode="after")
    def _fewer_walkers_than_live_points(self) -> HybridSettings:
        if self.nested_parallel >= self.live_points:
            raise ValueError(
                f"nested_parallel must be below live_points ({self.live_points}), "
                f"got {self.nested_parallel}"
            )
        return self

    @property
    def nested(self) -> NestedSettings:
        """The settings of the nested phase (the other nested settings at their defaults)."""
        return NestedSettings(
            live_points=self.live_points, parallel=self.nested_parallel, device=self.device
        )


class ExactSettings(Settings):
    """``exact``: closed-form evidence of a conjugate model; nothing to tune but the device."""
