"""The one place the service calls the engine: build, init, update and summarise one model."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from estimators import ColumnView, History, Info, Rows, build_estimator, state_from_bytes
from estimators.history import cat_rows, select_columns
from estimators.partial_posteriors import PathEstimate, debiased_expectation, path_runner
from estimators.posterior_functionals import Functional
from estimators.rng import derive_generator
from estimators.variational import has_elbo, mccavi_elbo
from models import Prediction
from service.schemas import ComparisonSpec, ModelSpec

log = logging.getLogger("modelcompare.engine")

# Estimators whose particles can serve as partial posteriors for non-conjugate models.
PARTICLE_METHODS = ("sgais", "sequential", "minibatch_mh")


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity: report those as null."""
    return value if math.isfinite(value) else None


class Runner:
    """A model of a comparison with its estimator, reading its columns of the shared rows."""

    def __init__(self, comparison: ComparisonSpec, spec: ModelSpec) -> None:
        self.name = spec.name
        self.seed = comparison.seed
        self.model = spec.build()
        self.method = comparison.estimator["method"]
        self.settings = {k: v for k, v in comparison.estimator.items() if k != "method"}
        self.estimator = build_estimator(self.method, self.model, **self.settings)
        self.columns = spec.columns if self.model.input_dim > 0 else None
        self._column_index = None if self.columns is None else torch.tensor(self.columns)
        self._elbo: dict[str, Any] | None = None  # refreshed by ``update`` when n doubles

    def init_state(self) -> Any:
        return self.estimator.init(derive_generator(self.seed, self.name, "init"))

    def load(self, data: bytes) -> Any:
        return state_from_bytes(self.estimator.state_type, data)

    def select(self, rows: Rows) -> Rows:
        """This model's columns of x (none for a model without inputs); y as given."""
        return select_columns(rows, self._column_index if rows.x is not None else None)

    def validate(self, rows: Rows) -> None:
        """``ValueError`` when the rows are outside the model's support (e.g. bad labels)."""
        picked = self.select(rows)
        self.model.validate_data(picked.x, picked.y)

    def update(self, state: Any, rows: Rows, history: History, sequence: int) -> tuple[Any, Info]:
        """Absorb the chunk of ``sequence``; ``history`` holds exactly the rows before it."""
        view = ColumnView(history, self.columns)
        generator = derive_generator(self.seed, self.name, sequence)
        chunk = view.select(rows)
        state, info = self.estimator.update(state, chunk, view, generator)
        before, after = len(history), len(history) + rows.count
        if has_elbo(self.model) and rows.count and after.bit_length() > before.bit_length():
            generator = derive_generator(self.seed, self.name, sequence, "elbo")
            self._refresh_elbo(view, chunk, generator)
        return state, info

    def _refresh_elbo(self, view: ColumnView, chunk: Rows, generator: torch.Generator) -> None:
        """MC-CAVI over every row seen, only when n crosses a power of two: one O(n) pass per
        doubling, amortised O(1) per row like the control-variate anchor."""
        rows = cat_rows([*view.blocks(1 << 16), chunk])
        try:
            result = mccavi_elbo(self.model, rows, generator)
        except Exception as exc:  # the bound is an extra: no failure in it may cost the chunk
            log.warning("model %s: MC-CAVI failed: %s", self.name, exc)
            self._elbo = {"elbo": None, "elbo_n_observations": rows.count}
            return
        self._elbo = {"elbo": finite(result.elbo), "elbo_n_observations": rows.count}

    def summary(self, state: Any, info: Info | None) -> dict[str, Any]:
        """The per-model part of the evidence body. ``elbo`` (MC-CAVI lower bound on log Z of
        the first ``elbo_n_observations`` rows, null where the family has none) is set at the
        start and whenever ``update`` refreshed it; otherwise the stored value carries on."""
        details = None if info is None else info.as_dict()
        elbo = self._elbo or ({"elbo": None, "elbo_n_observations": 0} if info is None else {})
        return {
            **elbo,
            "log_evidence": finite(self.estimator.log_evidence(state)),
            "log_evidence_stderr": finite(math.sqrt(self.estimator.log_evidence_variance(state))),
            "n_observations": self.estimator.n_observations(state),
            "ess": finite(self.estimator.ess(state)),
            "info": None if details is None else {
                k: finite(v) if isinstance(v, float) else v for k, v in details.items()
            },
        }

    def predict(self, state: Any, x: torch.Tensor | None) -> Prediction:
        """Posterior predictive at this model's columns of ``x`` (models without inputs get x
        only for its row count)."""
        if x is not None and self.columns is not None:
            x = x[:, self.columns]
        return self.estimator.predict(state, x)

    def expectation(self, rows: Rows, functional: str, x: torch.Tensor | None,
                    repetitions: int, alpha: float, generator: torch.Generator) -> PathEstimate:
        """Debiased E[φ(θ) | rows] by paths of partial posteriors: exact ones for conjugate
        families, else this comparison's particle estimator (default SG-AIS) on each subset."""
        if x is not None and self.columns is not None:
            x = x[:, self.columns]
        method = self.method if self.method in PARTICLE_METHODS else "sgais"
        settings = self.settings if self.method in PARTICLE_METHODS else {}
        return debiased_expectation(path_runner(self.model, method, **settings),
                                    self.select(rows), Functional(functional, x), generator,
                                    repetitions=repetitions, alpha=alpha)
