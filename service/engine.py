"""The one place the service calls the engine: a model of a comparison bound to its estimator,
built once per (comparison seed and estimator, model spec) and cached (``runner_for``)."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from modelcompare.estimators import ColumnView, Deadline, Estimator, History, Rows, build
from modelcompare.estimators.data.history import cat_rows, select_columns
from modelcompare.estimators.functionals.partial_posteriors import (
    PathEstimate,
    debiased_expectation,
    path_runner,
)
from modelcompare.estimators.functionals.posterior_functionals import Functional
from modelcompare.estimators.validated import dimension_warning
from modelcompare.estimators.variational.mccavi import has_elbo, mccavi_elbo
from modelcompare.models import Model, Prediction
from modelcompare.service.progress import Reading
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.store.history import model_view

log = logging.getLogger("modelcompare.engine")

# Estimators whose particles can serve as partial posteriors for non-conjugate models.
PARTICLE_METHODS = ("sgais", "sequential", "minibatch_mh")
RUNNER_CACHE = 1024  # bound runners kept per process (a model object and closures each)


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity: report those as null."""
    return value if math.isfinite(value) else None


class ModelUpdate(NamedTuple):
    """What one update of one model did: the estimator's Info record, and the MC-CAVI bound
    when this update refreshed it (n crossed a power of two), else None."""

    info: Any
    elbo: dict[str, Any] | None


@dataclass(frozen=True)
class Runner:
    """A model of a comparison with its estimator, reading its columns of the shared rows.
    Immutable, so one instance serves every request and worker thread."""

    name: str
    seed: int
    model: Model
    estimator: Estimator[Any, Any]
    columns: list[int] | None
    column_index: torch.Tensor | None
    settings: dict[str, Any]  # the estimator settings as the comparison stores them

    def init_state(self) -> Any:
        return self.estimator.init(self.estimator.generator(self.seed, self.name, "init"))

    def load(self, data: bytes) -> Any:
        return self.estimator.load(data)

    def select(self, rows: Rows) -> Rows:
        """This model's columns of x (none for a model without inputs); y as given."""
        return select_columns(rows, self.column_index if rows.x is not None else None)

    def validate(self, rows: Rows) -> None:
        """``ValueError`` when the rows are outside the model's support (e.g. bad labels)."""
        picked = self.select(rows)
        self.model.validate_data(picked.x, picked.y)

    def update(
        self,
        state: Any,
        rows: Rows,
        history: History,
        sequence: int,
        deadline: Deadline | None = None,
    ) -> tuple[Any, ModelUpdate]:
        """Absorb the chunk of ``sequence``; ``history`` holds exactly the rows before it.
        Past ``deadline`` the estimator raises ``BudgetExceeded`` and nothing changed."""
        # (a worker's history may hold only the columns some model reads: model_view maps)
        view, chunk = model_view(history, self.columns, rows)
        generator = self.estimator.generator(self.seed, self.name, sequence)
        state, info = self.estimator.update(state, chunk, view, generator, deadline)
        before, after = len(history), len(history) + rows.count
        elbo = None
        if has_elbo(self.model) and rows.count and after.bit_length() > before.bit_length():
            generator = self.estimator.generator(self.seed, self.name, sequence, "elbo")
            elbo = self._elbo(view, chunk, generator)
        return state, ModelUpdate(info, elbo)

    def _elbo(self, view: ColumnView, chunk: Rows, generator: torch.Generator) -> dict[str, Any]:
        """MC-CAVI over every row seen, only when n crosses a power of two: one O(n) pass per
        doubling, amortised O(1) per row like the control-variate anchor."""
        rows = cat_rows([*view.blocks(1 << 16), chunk])
        try:
            result = mccavi_elbo(self.model, rows, generator)
        except Exception as exc:  # the bound is an extra: no failure in it may cost the chunk
            log.warning("model %s: MC-CAVI failed: %s", self.name, exc)
            return {"elbo": None, "elbo_n_observations": rows.count}
        return {"elbo": finite(result.elbo), "elbo_n_observations": rows.count}

    def reading(self, state: Any, update: ModelUpdate | None) -> Reading:
        """What ``state`` says after ``update`` (None: the initial state). The MC-CAVI bound
        (on log Z of the first ``elbo_n_observations`` rows, null where the family has none) is
        set at the start and whenever ``update`` refreshed it; otherwise the stored value
        carries on (``refreshed_elbo`` false)."""
        estimator = self.estimator
        elbo = update.elbo if update is not None else {"elbo": None, "elbo_n_observations": 0}
        info = None if update is None else dataclasses.asdict(update.info)
        return Reading(
            log_evidence=finite(estimator.log_evidence(state)),
            log_evidence_stderr=finite(math.sqrt(estimator.log_evidence_variance(state))),
            n_observations=estimator.n_observations(state),
            ess=finite(estimator.ess(state)),
            info=None if info is None else {
                k: finite(v) if isinstance(v, float) else v for k, v in info.items()
            },
            refreshed_elbo=elbo is not None,
            **(elbo or {}),
        )

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
        method = self.estimator.method
        settings = self.settings if method in PARTICLE_METHODS else {}
        return debiased_expectation(
            path_runner(self.model, method if method in PARTICLE_METHODS else "sgais", **settings),
            self.select(rows), Functional(functional, x), generator,
            repetitions=repetitions, alpha=alpha,
        )


def runner_for(comparison: ComparisonSpec, spec: ModelSpec) -> Runner:
    """The bound runner of one model of a comparison, built once per spec and then cached (the
    estimator settings were validated when the comparison or model was created)."""
    estimator = json.dumps(comparison.estimator, sort_keys=True)
    return _cached_runner(comparison.seed, estimator, spec.model_dump_json())


def model_warnings(comparison: ComparisonSpec, spec: ModelSpec) -> list[str]:
    """What the estimator says a model's size asks of its evidence (``estimators.validated``);
    none for a model this process cannot build (its plugin missing here)."""
    if spec.unavailable() is not None:
        return []
    warning = dimension_warning(str(comparison.estimator["method"]),
                                _param_dim(spec.model_dump_json()))
    return [] if warning is None else [warning]


@functools.lru_cache(maxsize=RUNNER_CACHE)
def _param_dim(model: str) -> int:
    """A stored model's parameter count, without binding an estimator (listings describe many
    comparisons: they must not evict the runners the worker uses)."""
    return ModelSpec.model_validate_json(model).build().param_dim


def runners_of(comparison: ComparisonSpec) -> dict[str, Runner]:
    """Every model of a comparison bound to its estimator, by name."""
    return {m.name: runner_for(comparison, m) for m in comparison.models}


@functools.lru_cache(maxsize=RUNNER_CACHE)
def _cached_runner(seed: int, estimator: str, model: str) -> Runner:
    spec = ModelSpec.model_validate_json(model)
    settings = json.loads(estimator)
    method = settings.pop("method")
    built = spec.build()
    columns = spec.columns if built.input_dim > 0 else None
    return Runner(
        name=spec.name,
        seed=seed,
        model=built,
        estimator=build(built, method, **settings),
        columns=columns,
        column_index=None if columns is None else torch.tensor(columns),
        settings=settings,
    )
