"""Whether a model's running log Z still deserves its error bar: a sticky record of the updates
whose SGHMC moves diverged.

SG-AIS undoes an SGHMC trajectory that diverges, like a rejected HMC proposal (its info's
``diverged_fraction``: the fraction of the update's trajectories undone; null while the moves are
exact). On healthy streams that fraction stays at 0 (none of the 150 runs of the calibration
cells that pass went above 0.00); where it is large the moves are failing on this posterior (all
ten sorted mixture streams reached 0.80–1.00 and read 8,000–89,000 nats low: benchmarks/README.md,
"Stop 27" and "Stop 28"), and the particles can be far from it while the standard error stays
small. The next chunks may read 0 again with the damage done, so one such update marks the
model for good: log Z carries on, but ``reliable`` stays false and ``reason`` says where.
"""

from __future__ import annotations

from typing import Any


def initial() -> dict[str, Any]:
    """The record of a model that has not diverged (or not been updated) yet."""
    return {
        "reliable": True,
        "reason": None,
        "max_diverged_fraction": 0.0,
        "diverged_updates": 0,
        "first_diverged_at": None,
    }


def observe(summary: dict[str, Any], threshold: float) -> None:
    """Fold the summary's last update (``info.diverged_fraction``) into its ``reliability``
    record (in place). An update counts as diverged when its fraction exceeds ``threshold``;
    ``first_diverged_at`` is the rows seen after the first such update."""
    record = {**initial(), **(summary.get("reliability") or {})}
    fraction = (summary.get("info") or {}).get("diverged_fraction")
    if fraction is not None:
        record["max_diverged_fraction"] = max(record["max_diverged_fraction"], fraction)
        if fraction > threshold:
            record["diverged_updates"] += 1
            if record["first_diverged_at"] is None:
                record["first_diverged_at"] = summary["n_observations"]
    if record["diverged_updates"]:
        record["reliable"] = False
        record["reason"] = (
            f"{record['diverged_updates']} update(s) undid more than {threshold:.0%} of their "
            f"SGHMC trajectories as diverged (the first by row {record['first_diverged_at']}, "
            f"at most {record['max_diverged_fraction']:.0%}): the moves failed on this "
            "posterior, and log Z may be off by more than its standard error"
        )
    summary["reliability"] = record


def reliable(summary: dict[str, Any]) -> bool:
    """Whether a model summary is unmarked (those stored before the record existed are)."""
    return bool((summary.get("reliability") or initial())["reliable"])
