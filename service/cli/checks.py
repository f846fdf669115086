"""What a command can check against a comparison before it sends anything: the stored spec as
``GET /v1/comparisons/{id}`` describes it, the widths of rows by position, and the target's
values against each model's support."""

from __future__ import annotations

from typing import Any

import torch

from modelcompare.models.target import Target
from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import FileData
from modelcompare.service.cli.named import NamedFile
from modelcompare.service.records import ComparisonSpec, ModelSpec
from modelcompare.service.validation import Refusal


def comparison_spec(described: dict[str, Any]) -> ComparisonSpec:
    """The stored spec, from ``GET /v1/comparisons/{id}`` (no model is built from it: the
    family may not be installed here)."""
    models = [ModelSpec(name=m["name"], family=m["family"], package=m.get("package"),
                        version=m.get("version"), config=m["config"], columns=m["columns"],
                        prior_weight=m["prior_probability"], target=m.get("target"),
                        formula=m.get("formula"))
              for m in described["models"]]
    fields = ("id", "name", "seed", "created_at", "x_dim", "has_y", "estimator")
    named = {k: described.get(k) for k in ("variables", "target_column", "design")}
    # The formulas that make the stored design: its models' unless the description lists them
    # (it then keeps those of models removed since).
    formulas = [m.formula for m in models if m.formula is not None] or None
    return ComparisonSpec(**{k: described[k] for k in fields}, **named, models=models,
                          design_formulas=described.get("design_formulas", formulas))


def check_widths(spec: ComparisonSpec, x_cols: list[str], y_col: str | None) -> None:
    """The file's columns against a comparison by position: as many inputs as its rows have,
    and a target when its models have one."""
    reads = "; ".join(f"{m.name} reads columns {m.columns}" for m in spec.models if m.columns)
    if spec.x_dim != len(x_cols):
        wanted = "no --x-cols (no model reads x)" if not spec.x_dim else \
            f"{spec.x_dim} input columns (x_dim; {reads})"
        raise CliError(f"comparison {spec.name!r} takes {wanted}, but --x-cols names "
                       f"{len(x_cols)}" + (f": {', '.join(x_cols)}" if x_cols else ""))
    if spec.has_y != (y_col is not None):
        raise CliError(f"comparison {spec.name!r} needs a target: name it with --y-col"
                       if spec.has_y else
                       f"no model of comparison {spec.name!r} has a target: leave out --y-col")


def check_target(spec: ComparisonSpec, data: FileData | NamedFile, name: str,
                 y_col: str | None) -> None:
    """What the server would refuse of the target, found before anything is sent: labels, and
    the values each model's y may take as the server describes them (``Target``), naming the
    first data row a model refuses. A plugin family's own further rules are the server's to
    apply: such a refusal stops the send at that chunk."""
    if data.labels is not None:
        numeric = [f"{m.name} ({m.family})" for m in spec.models
                   if m.target is not None and m.target["kind"] != "label"]
        if numeric:
            raise CliError(f"column {y_col!r} of {name} holds labels ({', '.join(data.labels)}), "
                           f"but these models need numbers: {', '.join(numeric)}")
    refusal = None if data.y is None else first_refusal(spec, torch.from_numpy(data.y))
    if refusal is not None:
        hint = ""
        if data.labels is not None:
            label = data.labels[int(data.y[refusal.row])]  # type: ignore[index]
            hint = (f" (label {label!r}; the file has {len(data.labels)} labels, numbered from "
                    "0)")
        elif (spec.model(refusal.model).target or {}).get("kind") == "label":
            hint = ("; class labels are whole numbers from 0 (text labels are numbered for you: "
                    "sorted, or in --labels order)")
        raise CliError(refusal.describe(f"data row {refusal.row + 1} of {name}") + hint)


def first_refusal(spec: ComparisonSpec, y: torch.Tensor) -> Refusal | None:
    """The first model (in the spec's order) whose target refuses a value of ``y``, with the
    first such row, or None."""
    for model in spec.models:
        if model.target is None:
            continue
        target = Target.of(model.target)
        refused = torch.nonzero(target.refused(y)).flatten()
        if refused.numel():
            row = int(refused[0])
            return Refusal(model.name, f"{model.family} needs {target.requirement()}", row,
                           f"y = {float(y[row]):g}")
    return None
