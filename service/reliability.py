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
even after a re-estimate: see docs/design/drift.md); it then explains every chunk in one
annealing step, log Z drifts thousands of nats low, and its standard error is that of one
particle. The update's ``spread`` (``modelcompare.estimators.online.spread``: the cloud's width in
units of the posterior's, about 1 while it follows it) shows it: below ``FROZEN`` marks the model
too.
"""

from __future__ import annotations

from typing import Any

from modelcompare.estimators.online.spread import FROZEN


def initial() -> dict[str, Any]:
    """The record of a model that has not diverged (or not been updated) yet."""
    return {
        "reliable": True,
        "reason": None,
        "max_diverged_fraction": 0.0,
        "diverged_updates": 0,
        "first_diverged_at": None,
        "frozen_at": None,
    }


def observe(summary: dict[str, Any], threshold: float) -> None:
    """Fold the summary's last update (``info.diverged_fraction`` and ``info.spread``) into its
    ``reliability`` record (in place). An update counts as diverged when its fraction exceeds
    ``threshold``; ``first_diverged_at`` is the rows seen after the first such update, and
    ``frozen_at`` after the first whose spread was below ``FROZEN``."""
    record = {**initial(), **(summary.get("reliability") or {})}
    info = summary.get("info") or {}
    fraction = info.get("diverged_fraction")
    if fraction is not None:
        record["max_diverged_fraction"] = max(record["max_diverged_fraction"], fraction)
        if fraction > threshold:
            record["diverged_updates"] += 1
            if record["first_diverged_at"] is None:
                record["first_diverged_at"] = summary["n_observations"]
    spread = info.get("spread")
    if spread is not None and spread < FROZEN and record["frozen_at"] is None:
        record["frozen_at"] = summary["n_observations"]
    reasons = []
    if record["diverged_updates"]:
        reasons.append(
            f"{record['diverged_updates']} update(s) undid more than {threshold:.0%} of their "
            f"SGHMC trajectories as diverged (the first by row {record['first_diverged_at']}, "
            f"at most {record['max_diverged_fraction']:.0%}): the moves failed on this "
            "posterior"
        )
    if record["frozen_at"] is not None:
        reasons.append(
            f"the particles had collapsed onto one point by row {record['frozen_at']} (their "
            f"spread under {FROZEN:g} of the posterior's variance)"
        )
    if reasons:
        record["reliable"] = False
        record["reason"] = "; ".join(reasons) + (
            ", and log Z may be off by more than its standard error"
        )
    summary["reliability"] = record


def reliable(summary: dict[str, Any]) -> bool:
    """Whether a model summary is unmarked (those stored before the record existed are)."""
    return bool((summary.get("reliability") or initial())["reliable"])
