"""The sums a model prepares for many θ (``weighted_sum``, ``stepwise_sums``, ``*_of_parts``),
which the estimators' moves call at every leapfrog step, against the model's own log_likelihood:
values equal to the weighted sums of its rows up to rounding, gradients equal to their central
differences (``gradients.Difference``)."""

from __future__ import annotations

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.online.precision import LoweredSum, lowered
from modelcompare.models.base import Model, WeightedSum
from modelcompare.models.conformance.contract import expect_tensor
from modelcompare.models.conformance.findings import Violation
from modelcompare.models.conformance.gradients import Difference
from modelcompare.models.weighting import WeightedRows

SECOND_WEIGHT = 0.25  # the second part's row weight: a sum that drops the weights shows
FLOAT32_TOLERANCE = torch.finfo(torch.float32).eps ** 0.5
HINT = ("Fix the override, or delete it: the defaults call log_likelihood_and_grad per part. "
        "Each part's rows count with their part's weight.")


def check_weighted_sums(model: Model, rows: Rows, generator: torch.Generator) -> str:
    theta = model.sample_prior(3, generator)
    half = rows.count // 2
    first = rows.slice(0, half)
    second = rows.slice(half, half + 2 * ((rows.count - half) // 2))  # two equal steps
    parts: list[WeightedRows] = [(first.x, first.y, 1.0), (second.x, second.y, SECOND_WEIGHT)]
    of = f"Σ over the parts of weight × Σ_r log_likelihood (weights 1 and {SECOND_WEIGHT})"
    difference = Difference(lambda t: weighted_terms(model, t, first, second), theta)
    prepared = model.weighted_sum(parts)
    compare(difference, "weighted_sum(parts)", prepared, theta, of)
    parts_value, parts_gradient = model.log_likelihood_and_grad_of_parts(theta, parts)
    compare_value(difference, "log_likelihood_and_grad_of_parts(θ, parts)[0]", parts_value, of)
    difference.compare("log_likelihood_and_grad_of_parts(θ, parts)[1]", parts_gradient, of, HINT)
    difference.compare("grad_log_likelihood_of_parts(θ, parts)",
                       model.grad_log_likelihood_of_parts(theta, parts), of, HINT)
    check_float32(model, parts, theta, difference.rows.sum(-1), prepared.value_and_grad(theta)[1])
    steps = model.stepwise_sums([parts[0]], [parts[1]], 2)
    if len(steps) != 2:
        raise Violation(f"stepwise_sums(fixed, streams, 2) gave {len(steps)} sums; it gives "
                        "one per step")
    size = second.count // 2
    for i, step in enumerate(steps):
        piece = second.slice(i * size, (i + 1) * size)
        step_difference = Difference(lambda t, p=piece: weighted_terms(model, t, first, p), theta)
        compare(step_difference, f"stepwise_sums(fixed, streams, 2)[{i}]", step, theta,
                f"the fixed rows' sum plus slice {i} of the stream's ({of})")
    lowered_too = " (and on float32 rows, as the moves prepare them)" if (
        model.gradients_read_rows) else ""
    return (f"weighted_sum, stepwise_sums and *_of_parts match log_likelihood on {rows.count} "
            f"rows{lowered_too}")


def check_float32(model: Model, parts: list[WeightedRows], theta: Tensor, value: Tensor,
                  gradient: Tensor) -> None:
    """The moves prepare their sums on float32 rows (modelcompare.estimators.online.precision) where
    the model's sums read rows: the same sums, to float32's precision. Its ε is 1.2e-7; √ε leaves
    room for the rounding of thousands of rows and still catches a sum that is wrong."""
    if not model.gradients_read_rows:
        return
    prepared = LoweredSum(model.weighted_sum(lowered(parts, torch.float32)), torch.float32)
    lowered_value, lowered_gradient = prepared.value_and_grad(theta)
    tolerance = FLOAT32_TOLERANCE * (1.0 + value.abs().amax() + gradient.abs().amax())
    for what, found, expected in (("value", lowered_value, value),
                                  ("gradient", lowered_gradient, gradient)):
        if not bool(((found - expected).abs() <= tolerance).all()):
            raise Violation(f"weighted_sum on float32 rows gives another {what} than on float64 "
                            "rows: compute in the dtype of the rows given (the moves prepare "
                            "float32 sums); create constants with the rows' dtype")


def weighted_terms(model: Model, theta: Tensor, first: Rows, second: Rows) -> Tensor:
    return torch.cat([model.log_likelihood(theta, first.x, first.y),
                      SECOND_WEIGHT * model.log_likelihood(theta, second.x, second.y)], -1)


def compare(difference: Difference, what: str, prepared: WeightedSum, theta: Tensor,
            of: str) -> None:
    value, gradient = prepared.value_and_grad(theta)
    compare_value(difference, f"{what}.value_and_grad(θ)[0]", value, of)
    difference.compare(f"{what}.value_and_grad(θ)[1]", gradient, of, HINT)
    difference.compare(f"{what}.grad(θ)", prepared.grad(theta), of, HINT)


def compare_value(difference: Difference, what: str, value: object, of: str) -> None:
    if difference.value_gap(expect_tensor(what, value, (difference.rows.shape[0],))):
        raise Violation(f"{what} is not {of}. {HINT}")
