"""Windowed evidence: log p(last W rows | earlier rows) per model, read as a difference of the
running log Z at two points of the stream.

Each model's progress record (service/progress.py) carries checkpoints (n, log Z, Var log Z)
after every applied chunk; they are internal: the public body shows the window only. The SG-AIS
variance is a sum of per-piece variances, so the window's log Z is log Z(now) − log Z(n₀) and its
variance Var(now) − Var(n₀), n₀ the last checkpoint at least W rows back (the whole
stream while fewer than W rows were seen). At most ``MAX_CHECKPOINTS`` are kept: beyond that
every other one inside the window is dropped, so n₀ stays at least W rows back and the window's
``rows`` says how many rows it spans. After a re-estimate of log Z over every row
(``info.reestimated``) the window starts again there (null until the next chunk). The windowed
log Bayes factor of a model is its windowed log Z minus the best model's; the two estimators
are independent, so their variances add.
"""

from __future__ import annotations

import math
from typing import Any

from modelcompare.service.progress import Checkpoint, ModelProgress, Window

MAX_CHECKPOINTS = 64


def advance(model: ModelProgress, window_rows: int) -> ModelProgress:
    """The model with its current (n, log Z, variance) appended to its checkpoints, trimmed,
    and the window they give; as it was while log Z or its stderr is unknown."""
    n, log_z, stderr = model.n_observations, model.log_evidence, model.log_evidence_stderr
    if log_z is None or stderr is None:
        return model
    if (model.info or {}).get("reestimated"):
        # log Z was estimated again over every row (modelcompare.estimators.online.reestimate):
        # the earlier checkpoints belong to the estimate it replaced, so the window starts here
        return model.model_copy(update={"checkpoints": ((n, log_z, stderr * stderr),),
                                        "window": None})
    points = slide(model.checkpoints, (n, log_z, stderr * stderr), window_rows)
    return model.model_copy(update={"checkpoints": points, "window": span(points)})


def slide(points: tuple[Checkpoint, ...], point: Checkpoint,
          window_rows: int) -> tuple[Checkpoint, ...]:
    """``points`` (from (0, 0, 0) when empty) with ``point`` appended when it is past the last,
    starting at the last one at least ``window_rows`` rows before it, thinned to
    ``MAX_CHECKPOINTS``."""
    kept: list[Checkpoint] = list(points or ((0, 0.0, 0.0),))
    if point[0] > kept[-1][0]:
        kept.append(point)
    oldest = max((i for i, p in enumerate(kept) if p[0] <= point[0] - window_rows), default=0)
    kept = kept[oldest:]
    while len(kept) > MAX_CHECKPOINTS:
        kept = [kept[0], *kept[1:-1:2], kept[-1]]
    return tuple(kept)


def span(points: tuple[Checkpoint, ...]) -> Window:
    """The window from the first checkpoint to the last: differences of value and variance."""
    start, end = points[0], points[-1]
    return Window(rows=end[0] - start[0], log_evidence=end[1] - start[1],
                  log_evidence_stderr=math.sqrt(max(end[2] - start[2], 0.0)))


def bayes_factors(windows: dict[str, Window | None],
                  comparable: set[str]) -> dict[str, dict[str, Any] | None]:
    """The public window of each model (null before its first): the window with its log Bayes
    factor against the best comparable model's window and that factor's stderr (null for a
    model not comparable, or while the windows span different rows)."""
    found = {name: w for name, w in windows.items() if name in comparable and w is not None}
    spans = {w.rows for w in found.values()}
    best = max(found, key=lambda name: found[name].log_evidence, default=None)
    public: dict[str, dict[str, Any] | None] = {}
    for name, window in windows.items():
        if window is None:
            public[name] = None
        elif best is None or name not in found or len(spans) > 1:
            public[name] = {**window.model_dump(), "log_bayes_factor": None,
                            "log_bayes_factor_stderr": None, "best": None}
        else:
            top = found[best]
            public[name] = {
                **window.model_dump(),
                "log_bayes_factor": window.log_evidence - top.log_evidence,
                "log_bayes_factor_stderr": math.hypot(window.log_evidence_stderr,
                                                      top.log_evidence_stderr),
                "best": best,
            }
    return public
