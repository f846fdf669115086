"""Whether a model's running log Z still deserves its error bar: a sticky record of the updates
whose SGHMC moves diverged, and of the first whose particle cloud had frozen.

SG-AIS undoes an SGHMC trajectory that diverges, like a rejected HMC proposal (its info's
``diverged_fraction``: the fraction of the update's trajectories undone; null while the moves are
exact). On healthy streams that fraction stays at 0 (no run of the calibration cells that pass
goes above 0.00); where it is large the moves are failing on this posterior (sorted mixture
streams read near 1 and end thousands of nats low: see docs/design/standard-error.md), and the
particles can be far from it while the standard error stays small. The next chunks may read 0
again with the damage done, so one such update marks the model for good: log Z carries on, but
``reliable`` stays false and ``reason`` says where.

A cloud can also collapse onto one point without a diverged move (a sorted mixture stream can,
even after a re-estimate: see docs/design/re-estimates.md); it then explains every chunk in one
annealing step, log Z drifts thousands of nats low, and its standard error is that of one
particle. The update's ``spread`` (``modelcompare.estimators.online.spread``: the cloud's width in
units of the posterior's, about 1 while it follows it) shows it: below ``FROZEN`` marks the model
too. So does a cloud far wider than the posterior (above ``WIDE``): the particles no longer follow
it, as on sorted mixture streams some chunks after a new region, where log Z can be tens of nats
low without a diverged move.
"""

from __future__ import annotations

from typing import Any

from modelcompare.estimators.online.spread import FROZEN, WIDE
from modelcompare.service.progress import Reliability


def observe(record: Reliability, info: dict[str, Any] | None, n_observations: int,
            threshold: float) -> Reliability:
    """The record with an update folded in (its ``info.diverged_fraction`` and ``info.spread``,
    ``n_observations`` rows seen after it). An update counts as diverged when its fraction
    exceeds ``threshold``; ``first_diverged_at`` is the rows seen after the first such update,
    ``frozen_at`` after the first whose spread was below ``FROZEN`` and ``wide_at`` after the
    first whose spread was above ``WIDE``."""
    info = info or {}
    fraction, spread = info.get("diverged_fraction"), info.get("spread")
    largest, diverged, first = (record.max_diverged_fraction, record.diverged_updates,
                                record.first_diverged_at)
    if fraction is not None:
        largest = max(largest, fraction)
        if fraction > threshold:
            diverged += 1
            first = n_observations if first is None else first
    frozen, wide = record.frozen_at, record.wide_at
    if spread is not None and spread < FROZEN and frozen is None:
        frozen = n_observations
    if spread is not None and spread > WIDE and wide is None:
        wide = n_observations
    reasons = []
    if diverged:
        reasons.append(
            f"{diverged} update(s) undid more than {threshold:.0%} of their SGHMC trajectories "
            f"as diverged (the first by row {first}, at most {largest:.0%}): the moves failed on "
            "this posterior"
        )
    if frozen is not None:
        reasons.append(
            f"the particles had collapsed onto one point by row {frozen} (their spread under "
            f"{FROZEN:g} of the posterior's variance)"
        )
    if wide is not None:
        reasons.append(
            f"the particles had spread far wider than the posterior by row {wide} (their spread "
            f"over {WIDE:g} times the posterior's variance)"
        )
    reason = "; ".join(reasons) + ", and log Z may be off by more than its standard error"
    return Reliability(
        reliable=record.reliable and not reasons,
        reason=reason if reasons else record.reason,
        max_diverged_fraction=largest,
        diverged_updates=diverged,
        first_diverged_at=first,
        frozen_at=frozen,
        wide_at=wide,
    )
