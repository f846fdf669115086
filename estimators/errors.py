"""What can go wrong in an estimator: bad settings, an update that cannot be computed, an
update that ran past its deadline, and one its caller cut off."""

from __future__ import annotations

from typing import NamedTuple


class EstimatorConfigError(ValueError):
    """An estimator setting is unknown or out of its valid range."""


class EstimatorError(RuntimeError):
    """An update could not be computed: non-finite likelihoods, a stalled annealing ladder, a
    degenerate particle cloud. The state passed in is untouched (states are immutable)."""


class Progress(NamedTuple):
    """How far an update got: rows of the chunk absorbed in full, and on the piece under way the
    temperature λ reached (None where the method does not anneal) and the steps done (annealing
    steps, or nested-sampling iterations)."""

    rows: int
    temperature: float | None
    steps: int


class BudgetExceeded(EstimatorError):
    """The update ran past its deadline (``modelcompare.estimators.Deadline``) and stopped
    cooperatively, between annealing steps or moves. The state passed in is untouched."""

    def __init__(self, progress: Progress) -> None:
        where = "" if progress.temperature is None else f" at λ = {progress.temperature:.3g}"
        super().__init__(
            f"the update ran past its deadline after absorbing {progress.rows} row(s) of the "
            f"chunk; the next piece stopped{where} after {progress.steps} step(s)"
        )
        self.progress = progress


class CutOff(Exception):
    """The update passed its caller's cutoff (``Deadline.cutoff``) and was abandoned, not
    failed: the state passed in is untouched. Unlike ``BudgetExceeded``, which a step may take
    as a reason to do less (a re-estimate deferred), nothing inside an update catches it, so an
    update either ends as it would have with its whole budget or not at all."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(f"the update was cut off after absorbing {progress.rows} row(s)")
        self.progress = progress
