"""What the commands print: a comparison's evidence table, and the list of comparisons."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

FORMULA_WIDTH = 30  # characters a formula may take before it wraps, when names are shorter


def formulas(described: dict[str, Any]) -> dict[str, str]:
    """Each model's formula, by model name, from ``GET /v1/comparisons/{id}`` (none for a
    comparison by position)."""
    return {m["name"]: m["formula"] for m in described["models"] if m.get("formula")}


def evidence_table(evidence: dict[str, Any], formulas: Mapping[str, str] | None = None) -> Table:
    """One row per model: log Z ± stderr, log Z / n, P(model | data), rows, ESS, state; an
    ELBO column when a model has one (a lower bound on log Z of the rows it covers). A model
    that has seen no row shows "—", not a log Z of 0; one whose moves diverged (its
    ``reliability``) shows "unreliable" in its state, and the reason under the table. A model
    in ``formulas`` shows its formula's right side under its name, dimmed: every model's left
    side names the same target."""
    status = evidence.get("status") or "ok"
    models = evidence["models"]
    elbo = any(m.get("elbo") is not None for m in models)
    notes = [evidence.get("status_reason")] if evidence.get("status_reason") else []
    if elbo:
        notes.append("ELBO: a lower bound on log Z of the rows it covers; \"(of k rows)\" marks "
                     "one that covers fewer rows than log Z: compare it with log Z at k rows")
    table = Table(title=f"{evidence['n_observations']} rows, {evidence['sequence']} chunks, "
                  f"version {evidence['version']}, status {status}")
    # The names never shrink (``no_wrap`` also keeps rich from collapsing their column): two
    # names cut to the same prefix would make two rows read as one model. The other columns
    # give way instead, the widest first: headers and states wrap, numbers end in "…". A
    # formula wraps under its name, within the name's width or FORMULA_WIDTH.
    names = max(len(m["name"]) for m in models)
    table.add_column("model", no_wrap=True, min_width=names,
                     max_width=max(names, FORMULA_WIDTH) if formulas else None)
    for column in ("log Z", "± stderr", "log Z / n", "P(model | data)", "rows", "ESS",
                   *(["ELBO"] if elbo else [])):
        table.add_column(column, justify="right")
    table.add_column("state", overflow="fold")
    probabilities = [m["posterior_probability"] or 0.0 for m in models]
    for m, probability in zip(models, probabilities, strict=True):
        n = m["n_observations"]
        seen = n > 0 and m["log_evidence"] is not None
        state = ("failed" if m.get("failed") else f"catching up ({n}/{evidence['n_observations']})"
                 if m.get("catching_up") else "current")
        # (a body from a server older than the reliability record has none: reliable)
        if not m.get("failed") and not (m.get("reliability") or {}).get("reliable", True):
            state += ", unreliable"
            notes.append(f"{m['name']} unreliable: {m['reliability']['reason']}")
        cells: list[RenderableType] = [
            _model_cell(m["name"], (formulas or {}).get(m["name"])),
            _fixed(m["log_evidence"] if seen else None, 2),
            _fixed(m["log_evidence_stderr"] if seen else None, 2),
            _fixed(m["log_evidence"] / n if seen else None, 4),
            _fixed(m["posterior_probability"], 4), str(n), _fixed(m["ess"], 1)]
        if elbo:
            cells.append(_elbo(m))
        table.add_row(*cells, state,
                      style="bold green" if probability == max(probabilities) > 0 else "")
    table.caption = "\n".join(notes) or None
    return table


def _model_cell(name: str, formula: str | None) -> RenderableType:
    if formula is None:
        return name
    right = Text(f"~ {formula.partition('~')[2].strip()}", style="dim", no_wrap=False,
                 overflow="fold")  # the Text's own no_wrap overrides its column's
    return Group(name, right)


def comparison_lines(comparisons: list[dict[str, Any]]) -> list[str]:
    """``GET /v1/comparisons`` (newest first), one line each, the id first (for scripts)."""
    lines = []
    for c in comparisons:
        count = len(c["models"])
        queued = c["ingested"] - c["sequence"]
        created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(c["created_at"]))
        lines.append(" · ".join([
            f"{c['id']}  {c['name']}", f"{count} model{'' if count == 1 else 's'}",
            c["estimator"]["method"], f"{c['sequence']} chunks applied"
            + (f", {queued} queued" if queued else ""), f"created {created}",
            *([f"{c['status']}: {c['status_reason']}"] if c["status"] != "ok" else [])]))
    return lines


def _elbo(model: dict[str, Any]) -> str:
    if model.get("elbo") is None:
        return "—"
    rows = model.get("elbo_n_observations")
    covers = f" (of {rows} rows)" if rows is not None and rows < model["n_observations"] else ""
    return f"{model['elbo']:.2f}{covers}"


def _fixed(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
