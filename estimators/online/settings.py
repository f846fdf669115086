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
from modelcompare.estimators.online.extension_settings import (
    CarefulSettings,
    IslandsSettings,
    ReestimateSettings,
    StandardErrorSettings,
    SurpriseSettings,
)
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
        description="exact, Metropolis-corrected HMC moves on the full past while n ≤ this; "
        "left unset, × D / 44 (at most 2000) for SGHMC methods with a model of D > 44 parameters",
    )
    gradient_dtype: Advanced[Literal["float32", "float64"]] = Field(
        "float32",
        description="arithmetic of the moves' likelihood gradients (exact HMC's leapfrog, plain "
        "SGHMC and its noise estimate) and, for a model of more than 44 parameters, of their "
        "products with the mass matrix: float32 about halves their cost; Metropolis tests, "
        "log-likelihoods, weights and the state stay float64",
    )

    @property
    def gradient_precision(self) -> torch.dtype:
        return getattr(torch, self.gradient_dtype)


class PastDataSettings(Settings):
    batch_size: int = Field(
        100,
        ge=1,
        le=4096,
        description="minibatch size drawn with replacement from the past; left unset, × D / 44 "
        "for SGHMC methods with a model of D > 44 parameters",
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
        20, ge=1, le=200, description="SGHMC steps per move (one move per annealing step); "
        "left unset, × √(D / 44) for a model of D > 44 parameters"
    )
    lr: Advanced[float] = Field(
        0.025,
        gt=0.0,
        le=10.0,
        description="SGHMC learning rate: η = lr / n (identity) or lr in the particle metric; "
        "left unset, × 44 / D for a model of D > 44 parameters",
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
    noise_estimate_variance: Advanced[bool] = Field(
        False,
        description="raise the noise friction also by the sampling variance of its own estimate, "
        "which otherwise leaves the moves hot (a second-order term; it over-cools where the "
        "friction nears its ceiling, e.g. a minibatch well under the scaled one); left unset, on "
        "for SGHMC moves with a model of D > 44 parameters",
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
            self.noise_friction and self.noise_estimate_variance,
            self.piece_batch_size,
        )


class AnnealingSettings(LadderSettings, SurpriseSettings, ReestimateSettings,
                        StandardErrorSettings):
    resampling: Advanced[Literal["systematic", "stratified", "residual", "multinomial"]] = Field(
        "systematic", description="resampling scheme"
    )
    max_annealing_steps: Advanced[int] = Field(
        1000,
        ge=1,
        le=10_000,
        description="annealing steps per piece; more raise EstimatorError (a safeguard)",
    )


class SequentialSettings(SGHMCSettings, PastDataSettings, ExactPhaseSettings, ParticleSettings):
    """``sequential``: one plain predictive average per piece, then SGHMC moves."""


class SGAISSettings(CarefulSettings, IslandsSettings, AnnealingSettings, SequentialSettings):
    """``sgais``: ESS-adaptive annealing, resampling, SGHMC moves (exact HMC while n is small)."""

    increment_control: Advanced[Literal["score", "none"]] = Field(
        "score",
        description="score: the first annealing step of each piece corrected by control variates, "
        "the score of the past's posterior at each particle (two more minibatch gradients per "
        "piece), where particles ≥ 4 × (parameters + 1); none: plain increments",
    )
    mass_clouds: Advanced[int] = Field(
        1,
        ge=1,
        le=64,
        description="past the exact phase, the SGHMC mass matrix is the particle covariance "
        "pooled over about this many of the earlier annealing steps' clouds, carried from chunk "
        "to chunk (1: each step's own cloud); left unset, ⌈2D / 44⌉ for a model of D > 44 "
        "parameters",
    )
    start: Advanced[Literal["prior", "laplace"]] = Field(
        "prior",
        description="where a stream's first rows anneal from: prior, in the schedule's pieces; "
        "laplace, the first chunk's rows up to a quarter of full_batch_rows as one piece from the "
        "Gaussian at their posterior's mode (prior where that has no mode, and for "
        "label-symmetric models; hybrid starts with nested sampling, so there it is the start of "
        "a re-estimate); laplace takes a 161-parameter linear regression's first 500 rows in 17–20 "
        "annealing steps, where prior takes 650 (docs/design/gaussian-start.md); left unset, "
        "laplace for a model of D > 44 parameters",
    )

    @property
    def careful(self) -> SGAISSettings:
        """These settings with the ladder and moves of the careful steps (``careful``)."""
        return self.model_copy(
            update={"ess_target": self.careful_ess_target, "steps": self.careful_move_steps}
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
