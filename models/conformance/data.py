"""The rows the checks evaluate a model on: the user's own, or drawn with the model's predict.

The contract has no simulator, so synthetic rows come from what every model has. Inputs are
x ~ N(0, 1), the scale of standardised inputs. A model with a target gets y drawn at one prior
draw θ₀ from ``predict(θ₀, x)``: labels from its class ``probabilities``; from its ``mean`` and
``variance``, normal draws, or Poisson counts with that mean where ``validate_data`` refuses
those. Where predict gives neither (or gives malformed fields, which the predict check reports),
y is N(0, 1), then Poisson(1) counts, then fair coin flips: the first that ``validate_data``
accepts. A density model (no target) reads the x rows themselves.

Such rows are an exact draw from the model only where its noise is normal, Poisson or
categorical with the predictive's moments; otherwise they are rows in its support at a plausible
scale. That is all the checks need (shapes, gradients, and log Z computed two ways on the same
rows); a model of other data (positive y that is not Poisson, say) takes rows of its own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.models.base import Model, Prediction
from modelcompare.models.conformance.findings import Violation

F64 = torch.float64
Draw = Callable[[], Tensor]


def synthetic_rows(model: Model, count: int, generator: torch.Generator) -> tuple[Rows, str]:
    """``count`` rows the model accepts, and a line saying how they were drawn."""
    x = None
    if model.input_dim > 0:
        x = torch.randn(count, model.input_dim, generator=generator, dtype=F64)
    if not model.has_target:
        try:
            model.validate_data(x, None)
        except ValueError as exc:
            raise Violation(f"validate_data refused rows x ~ N(0, 1): {exc}. Pass rows of your "
                            "own data (--data)") from None
        return Rows(x, None), f"{count} synthetic rows, x ~ N(0, 1)"
    refusals = []
    for description, draw in targets(model, x, count, generator):
        try:
            y = draw()
            model.validate_data(x, y)
        except (ValueError, RuntimeError) as exc:
            refusals.append(f"{description}: {exc}")
            continue
        inputs = "" if x is None else "x ~ N(0, 1), "
        return Rows(x, y), f"{count} synthetic rows, {inputs}y {description}"
    raise Violation(
        "validate_data refused every target tried (" + "; ".join(refusals) + "). Give predict "
        "the fields of your target (class probabilities, or mean and variance), or pass rows "
        "of your own data (--data)."
    )


def targets(
    model: Model, x: Tensor | None, count: int, generator: torch.Generator
) -> list[tuple[str, Draw]]:
    """Ways to draw y, most faithful first: from predict at a prior draw, then generic ones."""
    normal = torch.randn(count, generator=generator, dtype=F64)
    draws: list[tuple[str, Draw]] = []
    try:
        theta = model.sample_prior(1, generator)
        fields = row_fields(model.predict(theta, theta.new_zeros(1), x), count)
    except Exception:  # a broken sampler or predict is for their own checks to report
        fields = {}
    if "probabilities" in fields:
        probabilities = fields["probabilities"]
        draws.append((
            "drawn from predict's class probabilities at a prior draw",
            lambda: torch.multinomial(probabilities, 1, generator=generator)[:, 0].to(F64),
        ))
    if "mean" in fields and "variance" in fields:
        mean, variance = fields["mean"], fields["variance"]
        draws += [
            ("normal with predict's mean and variance at a prior draw",
             lambda: mean + variance.sqrt() * normal),
            ("Poisson with predict's mean at a prior draw",
             lambda: torch.poisson(mean.clamp_min(0.0), generator=generator)),
        ]
    ones = torch.ones(count, dtype=F64)
    return [
        *draws,
        ("~ N(0, 1)", lambda: normal),
        ("~ Poisson(1)", lambda: torch.poisson(ones, generator=generator)),
        ("~ Bernoulli(1/2)", lambda: torch.bernoulli(0.5 * ones, generator=generator)),
    ]


def row_fields(prediction: Prediction, count: int) -> dict[str, Tensor]:
    """The prediction's fields usable for drawing ``count`` targets, one row each (a single row,
    as predict gives without inputs, stands for every row); malformed fields are left out."""
    found = {}
    for name, rank in (("mean", 1), ("variance", 1), ("probabilities", 2)):
        value = getattr(prediction, name, None)
        if not isinstance(value, Tensor) or value.ndim != rank or value.shape[0] not in (1, count):
            continue
        value = value.to(F64).expand(count, *value.shape[1:])
        negative = name != "mean" and bool((value < 0).any())
        if negative or not bool(torch.isfinite(value).all()):
            continue
        found[name] = value
    return found


def given_rows(model: Model, rows: Rows, count: int) -> tuple[Rows, str]:
    """The first ``count`` of the user's rows, in float64, checked by the model."""
    rows = rows.in_dtype(F64).slice(0, count)
    if rows.count < 4:
        raise Violation(f"the checks need at least 4 rows of data; {rows.count} given")
    try:
        model.validate_data(rows.x, rows.y)
    except ValueError as exc:
        raise Violation(f"validate_data refused the rows given: {exc}") from None
    return rows, f"the first {rows.count} rows given"
