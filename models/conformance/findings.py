"""What a conformance check reports, and the statistical threshold the checks share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from scipy.stats import norm
from torch import Tensor

# The chance that a correct model fails one statistical check at a given seed. A check that
# tests K statistics at once splits it over them (Bonferroni), so the chance holds per check
# whatever the model's dimension.
FALSE_ALARM_RATE = 1e-4
# The relative difference allowed between two computations of one float64 number that differ
# only in the order of their sums (one particle against a batch, whose BLAS blocking differs):
# far above the rounding of a few thousand terms (about 1e-13), far below any modelling mistake.
SAME_VALUE = 1e-9


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Finding:
    """One check's verdict; a failure's message says what is wrong and how to fix it."""

    check: str
    outcome: Outcome
    message: str


class Violation(Exception):
    """A check found the model breaking the contract; the message explains and advises."""


class Skipped(Exception):
    """A check does not apply to this model (the message says why)."""


def critical_z(statistics: int) -> float:
    """The |z| beyond which one of ``statistics`` z-scores fails at ``FALSE_ALARM_RATE``."""
    return float(norm.isf(FALSE_ALARM_RATE / (2 * statistics)))


def close(value: Tensor, reference: Tensor, magnitude: Tensor | float) -> bool:
    """Whether ``value`` equals ``reference`` up to ``SAME_VALUE`` times ``magnitude`` + 1, the
    size of the terms they were summed from (NaN never equals)."""
    return bool(((value - reference).abs() <= SAME_VALUE * (1.0 + magnitude)).all())
