"""Windowed evidence: log p(last W rows | earlier rows) per model, read as a difference of the
running log Z at two points of the stream.

Each model's summary carries checkpoints [n, log Z, Var log Z] after every applied chunk. The
SG-AIS variance is a sum of per-piece variances, so the window's log Z is log Z(now) − log Z(n₀)
and its variance Var(now) − Var(n₀), n₀ the last checkpoint at least W rows back (the whole
stream while fewer than W rows were seen). At most ``MAX_CHECKPOINTS`` are kept: beyond that
every other one inside the window is dropped, so n₀ stays at least W rows back and the window's
``rows`` says how many rows it spans. After a re-estimate of log Z over every row
(``info.restarted``) the window starts again there (null until the next chunk). The windowed
log Bayes factor of a model is its windowed log Z minus the best model's; the two estimators
are independent, so their variances add.
"""

from __future__ import annotations

import math
from typing import Any

MAX_CHECKPOINTS = 64


def advance(summary: dict[str, Any], window_rows: int) -> None:
    """Append the summary's current (n, log Z, variance) to its checkpoints and trim them."""
    points = [list(p) for p in summary.get("window_checkpoints") or [[0, 0.0, 0.0]]]
    n, log_z = summary["n_observations"], summary["log_evidence"]
    stderr = summary["log_evidence_stderr"]
    if log_z is None or stderr is None:
        return
    if (summary.get("info") or {}).get("restarted"):
        # log Z was estimated again over every row (modelcompare.estimators.online.restart): the
        # earlier checkpoints belong to the estimate it replaced, so the window starts here
        summary["window_checkpoints"], summary["window"] = [[n, log_z, stderr * stderr]], None
        return
    if n > points[-1][0]:
        points.append([n, log_z, stderr * stderr])
    oldest = max((i for i, p in enumerate(points) if p[0] <= n - window_rows), default=0)
    points = points[oldest:]
    while len(points) > MAX_CHECKPOINTS:
        points = [points[0], *points[1:-1:2], points[-1]]
    summary["window_checkpoints"] = points
    start, end = points[0], points[-1]
    summary["window"] = {
        "rows": end[0] - start[0],
        "log_evidence": end[1] - start[1],
        "log_evidence_stderr": math.sqrt(max(end[2] - start[2], 0.0)),
    }


def bayes_factors(models: list[dict[str, Any]], comparable: set[str]) -> None:
    """Each comparable model's windowed log Bayes factor against the best one's window (in
    place: ``window.log_bayes_factor`` and its stderr; null for the others)."""
    windows = {
        m["name"]: m["window"] for m in models if m["name"] in comparable and m.get("window")
    }
    spans = {w["rows"] for w in windows.values()}
    best = max(windows, key=lambda name: windows[name]["log_evidence"], default=None)
    for m in models:
        window = m.get("window")
        if not window:
            continue
        if best is None or m["name"] not in windows or len(spans) > 1:
            window.update(log_bayes_factor=None, log_bayes_factor_stderr=None, best=None)
            continue
        top = windows[best]
        window.update(
            log_bayes_factor=window["log_evidence"] - top["log_evidence"],
            log_bayes_factor_stderr=math.hypot(
                window["log_evidence_stderr"], top["log_evidence_stderr"]
            ),
            best=best,
        )
