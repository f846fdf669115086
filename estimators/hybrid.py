"""Hybrid: nested sampling on the first rows, SG-AIS on the rest of the stream.

The first rows move the posterior most (design doc: they carry most of SG-AIS's error), and a
batch method is cheap while the data is small. So the first ``nested_rows`` rows are absorbed by
nested sampling — re-run on all of them at each update until they are complete — and SG-AIS then
starts from the nested posterior samples, resampled to ``particles`` equal-weight points, with
the nested log Ẑ and its variance as its running totals.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from estimators.base import Info, check_int
from estimators.batch import all_rows, equal_weight_samples
from estimators.history import ExtendedHistory, History, Rows
from estimators.nested import NestedConfig, run_nested
from estimators.sgais import SGAIS, SGAISConfig, SGAISState
from estimators.weights import ess as kish_ess
from models import Model, Prediction


@dataclass(frozen=True)
class HybridConfig(SGAISConfig):
    nested_rows: int = 100  # rows absorbed by nested sampling before SG-AIS takes over
    live_points: int = 256  # nested-sampling live points
    nested_parallel: int = 16  # points the nested run replaces per iteration

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("nested_rows", self.nested_rows, 1)
        self.nested_config()  # checks live_points and nested_parallel

    def nested_config(self) -> NestedConfig:
        return NestedConfig(live_points=self.live_points, parallel=self.nested_parallel)


class Hybrid:
    state_type = SGAISState

    def __init__(self, model: Model, config: HybridConfig) -> None:
        self.model = model
        self.config = config
        self._sgais = SGAIS(model, config)
        self._nested = config.nested_config()

    def init(self, generator: torch.Generator) -> SGAISState:
        return self._sgais.init(generator)

    def log_evidence(self, state: SGAISState) -> float:
        return float(state.log_evidence)

    def log_evidence_variance(self, state: SGAISState) -> float:
        return float(state.log_evidence_variance)

    def n_observations(self, state: SGAISState) -> int:
        return int(state.n_observations)

    def ess(self, state: SGAISState) -> float:
        return kish_ess(state.log_weights)

    def predict(self, state: SGAISState, x: Tensor | None) -> Prediction:
        return self.model.predict(state.particles, state.log_weights, x)

    def update(
        self, state: SGAISState, chunk: Rows, history: History, generator: torch.Generator
    ) -> tuple[SGAISState, Info]:
        n = int(state.n_observations)
        if len(history) != n:
            raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
        if n >= self.config.nested_rows:
            return self._sgais.update(state, chunk, history, generator)
        head_rows = min(chunk.count, self.config.nested_rows - n)
        head, tail = chunk.slice(0, head_rows), chunk.slice(head_rows, chunk.count)
        nested_state, nested_info = self._nested_update(state, head, history, generator)
        if tail.count == 0:
            return nested_state, nested_info
        seen = ExtendedHistory(history, head)
        final, sgais_info = self._sgais.update(nested_state, tail, seen, generator)
        info = Info(
            rows=chunk.count,
            log_evidence_increment=nested_info.log_evidence_increment
            + sgais_info.log_evidence_increment,
            log_evidence_increment_variance=nested_info.log_evidence_increment_variance
            + sgais_info.log_evidence_increment_variance,
            ess=sgais_info.ess,
            min_ess=min(nested_info.min_ess, sgais_info.min_ess),
            annealing_steps=nested_info.annealing_steps + sgais_info.annealing_steps,
            resamples=sgais_info.resamples,
            sub_chunks=1 + sgais_info.sub_chunks,
            reanchors=sgais_info.reanchors,
            acceptance_rate=sgais_info.acceptance_rate,
        )
        return final, info

    def _nested_update(
        self, state: SGAISState, head: Rows, history: History, generator: torch.Generator
    ) -> tuple[SGAISState, Info]:
        """Nested sampling re-run on every row so far (all within the first ``nested_rows``)."""
        result = run_nested(self.model, all_rows(history, head), self._nested, generator)
        particles, log_weights = equal_weight_samples(
            result.particles, result.log_weights, self.config.particles, generator
        )
        variance = result.log_evidence_stderr**2
        new_state = state._replace(
            particles=particles,
            log_weights=log_weights,
            log_evidence=torch.tensor(result.log_evidence, dtype=torch.float64),
            log_evidence_variance=torch.tensor(variance, dtype=torch.float64),
            n_observations=state.n_observations + head.count,
        )
        nested_ess = kish_ess(result.log_weights)
        info = Info(
            rows=head.count,
            log_evidence_increment=result.log_evidence - float(state.log_evidence),
            # A re-run is independent of the previous run: the difference carries both variances.
            log_evidence_increment_variance=variance + float(state.log_evidence_variance),
            ess=float(self.config.particles),
            min_ess=nested_ess,
            annealing_steps=result.iterations,
            resamples=0,
            sub_chunks=1,
            reanchors=0,
            acceptance_rate=result.acceptance_rate,
        )
        return new_state, info
