"""Sequential SGHMC: no annealing and no reweighting.

log p(chunk | past) ≈ log (1/M) Σ_i p(chunk | θ_i) with the particles as they stand; then the
weights are dropped and SGHMC alone moves the particles onto the new posterior. This is the plain
predictive average users compare against: it is biased when a chunk is informative relative to
the particle cloud, which is what annealing and resampling in ``sgais`` repair.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from estimators.moves import MoveConfig
from estimators.sgais import SGAIS, _Tally
from models import Model

SequentialConfig = MoveConfig


class Sequential(SGAIS):
    def __init__(self, model: Model, config: MoveConfig) -> None:
        self.model = model
        self.config = config
        self._max_annealing_steps = 1

    def _next_increment(self, log_w: Tensor, log_lik: Tensor, remaining: float) -> float:
        return remaining

    def _select(
        self,
        theta: Tensor,
        log_w: Tensor,
        current_ess: float,
        generator: torch.Generator,
        tally: _Tally,
    ) -> tuple[Tensor, Tensor]:
        return theta, torch.full_like(log_w, -math.log(self.config.particles))
