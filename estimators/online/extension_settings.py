"""The settings groups of the engine's extensions, one per mechanism (docs/design/kernel.md):
the careful ladder, surprise moves, re-estimates, the variance rule and islands. The methods'
records (``settings``) are assembled from them. A group whose settings were renamed maps the old
names to the new ones (``renamed``), so that requests and stored comparisons written with them
still validate.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from modelcompare.estimators.settings import Advanced, Settings


def renamed(data: Any, names: dict[str, str]) -> Any:
    """Settings given by their deprecated ``names`` (old -> new) under the new ones; an old and a
    new name together are an error naming both."""
    if not isinstance(data, dict):
        return data
    for old, new in names.items():
        if old in data and new in data:
            raise ValueError(f"{old} is the old name of {new}: give {new} alone")
    return {names.get(key, key): value for key, value in data.items()}


class SurpriseSettings(Settings):
    """Surprise moves (docs/design/surprise-moves.md)."""

    surprise_steps: Advanced[int] = Field(
        8,
        ge=1,
        le=10_000,
        description="a piece annealed in more steps than this is surprising: re-anchor and "
        "make surprise_moves more moves; left unset, × D / 44 for SGHMC methods (× √(D / 44) "
        "for minibatch_mh) with a model of D > 44 parameters",
    )
    surprise_ess: Advanced[float] = Field(
        0.1, ge=0.0, le=1.0, description="a piece whose ESS / M fell below this is surprising"
    )
    surprise_moves: Advanced[int] = Field(
        5, ge=0, le=100, description="extra moves at λ = 1 after a surprising piece (0: none)"
    )


class ReestimateSettings(Settings):
    """Re-estimates over the shuffled rows (docs/design/re-estimates.md)."""

    reestimate_growth: float = Field(
        2.0,
        ge=0.0,
        le=100.0,
        description="once a chunk after the exact phase has left the particle system astray "
        "(over 10% of its SGHMC trajectories diverged, its cloud frozen or wide, or a piece "
        "annealed in more steps than the whole exact phase), re-estimate log Z "
        "from the prior over every row seen, shuffled, at the first chunk where n is at least "
        "this many times the rows of the last re-estimate (0: never; else at least 1.5): each "
        "costs what the rows seen cost",
    )
    reestimate_min_rows: Advanced[int] = Field(
        1000, ge=0, le=10**9, description="no re-estimate before n reaches this"
    )
    reestimate_max_rows: Advanced[int] = Field(
        20_000,
        ge=0,
        le=10**9,
        description="no re-estimate once n is past this (the pass runs inside one update)",
    )

    @model_validator(mode="before")
    @classmethod
    def _reestimate_old_names(cls, data: Any) -> Any:
        return renamed(data, {"restart_growth": "reestimate_growth",
                              "restart_min_rows": "reestimate_min_rows",
                              "restart_max_rows": "reestimate_max_rows"})

    @model_validator(mode="after")
    def _growth_bounds_the_cost(self) -> ReestimateSettings:
        # all re-estimates together cost growth / (growth − 1) times the rows of the last
        if 0.0 < self.reestimate_growth < 1.5:
            raise ValueError(
                f"reestimate_growth must be 0 or at least 1.5, got {self.reestimate_growth}"
            )
        return self


class StandardErrorSettings(Settings):
    """The variance rule (docs/design/standard-error.md)."""

    standard_error: Advanced[Literal["genealogy", "delta"]] = Field(
        "genealogy",
        description="log Z's stderr: from the particles' Eve groups per piece (across the "
        "selection back to M particles that ends a widened piece), or the sum of per-step "
        "delta-method variances",
    )


class CarefulSettings(Settings):
    """The careful ladder (docs/design/careful-ladder.md)."""

    careful_steps: Advanced[int] = Field(
        8,
        ge=1,
        le=10_000,
        description="the steps of a piece past this many (after the exact phase) are careful: "
        "careful_ess_target, careful_move_steps and careful_particles; left unset, × D / 44 "
        "for a model of D > 44 parameters",
    )
    careful_ess_target: Advanced[float] = Field(
        0.98,
        gt=0.0,
        le=0.99,
        description="ESS target of a piece's careful steps",
    )
    careful_move_steps: Advanced[int] = Field(
        60, ge=1, le=200, description="SGHMC steps per move in a piece's careful steps"
    )
    careful_particles: Advanced[int] = Field(
        4,
        ge=1,
        le=16,
        description="a piece's careful steps run with this many times the particles "
        "(resampled up at the first of them, back down at the piece's end)",
    )

    @model_validator(mode="before")
    @classmethod
    def _careful_old_names(cls, data: Any) -> Any:
        data = renamed(data, {"surprise_ess_target": "careful_ess_target",
                              "surprise_move_steps": "careful_move_steps",
                              "surprise_particles": "careful_particles"})
        # before the careful ladder had its own trigger it turned careful at surprise_steps
        if isinstance(data, dict) and "surprise_steps" in data and "careful_steps" not in data:
            data = {**data, "careful_steps": data["surprise_steps"]}
        return data


class IslandsSettings(Settings):
    """Islands (docs/design/islands.md)."""

    islands: int = Field(
        1,
        ge=1,
        le=16,
        description="independent particle systems of `particles` each, their Ẑ averaged, at this "
        "many times the cost: an error bar that narrows as fast as the error, where more "
        "particles in one system narrow it faster (drifting streams)",
    )
