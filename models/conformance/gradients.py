"""Every gradient a model provides against central differences of the values it is the gradient
of, in float64.

A central difference with step h has truncation error O(h²) and rounding error O(ε/h); the step
h = ε^(1/3)·max(1, |θ_j|) balances them (Nocedal & Wright 2006, §8.1). Its own error is
estimated from the difference itself: the estimates at h and h/2 differ by ¾ of the coarser
one's truncation error and by the independent rounding of both (Richardson), and no central
difference is better than ε^(2/3) times the size of the terms summed. A gradient fails where it
differs from the estimate at h/2 by more than ``ERROR_MULTIPLE`` times that error, which a
wrong gradient (a missing term, factor or sign) exceeds by orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.models.base import Model
from modelcompare.models.conformance.contract import expect_tensor
from modelcompare.models.conformance.findings import Violation, close

EPS = torch.finfo(torch.float64).eps
ERROR_MULTIPLE = 10.0
ROW_WEIGHT = 0.5  # a weight other than 1, so that a method ignoring ``row_weight`` shows
ROW_GRADIENT_ROWS = 8  # rows whose gradients are each differenced (one pass per row and θ_j)
Terms = Callable[[Tensor], Tensor]  # θ (M, D) -> the terms (M, R) whose sum is differentiated


class Difference:
    """Central differences of ``terms(θ)`` summed over rows (M, D), or per row (M, R, D)."""

    def __init__(self, terms: Terms, theta: Tensor, per_row: bool = False) -> None:
        step = EPS ** (1 / 3) * theta.abs().clamp_min(1.0)
        self.terms, self.per_row = terms, per_row
        self.rows = terms(theta)  # (M, R)
        coarse = self.derivative(theta, step)
        self.estimate = self.derivative(theta, step / 2)
        magnitude = self.rows.abs()[..., None] if per_row else self.rows.abs().sum(-1)[:, None]
        self.error = (coarse - self.estimate).abs() / 3 + EPS ** (2 / 3) * (1 + magnitude)

    def derivative(self, theta: Tensor, step: Tensor) -> Tensor:
        m, d = theta.shape
        offsets = torch.diag_embed(step)  # (M, D, D): row j of particle m is step_mj e_j
        up = (theta[:, None, :] + offsets).reshape(m * d, d)
        down = (theta[:, None, :] - offsets).reshape(m * d, d)
        values = self.terms(torch.cat([up, down]))
        if not self.per_row:
            values = values.sum(-1, keepdim=True)
        values = values.reshape(2, m, d, -1)
        span = (up - down).reshape(m, d, d).diagonal(dim1=1, dim2=2)  # the steps as rounded
        slopes = ((values[0] - values[1]) / span[..., None]).transpose(1, 2)  # (M, R', D)
        return slopes if self.per_row else slopes[:, 0]

    def value_gap(self, value: Tensor) -> bool:
        """Whether ``value`` (M,) differs from the summed terms beyond rounding."""
        return not close(value, self.rows.sum(-1), self.rows.abs().sum(-1))

    def compare(self, what: str, gradient: object, of: str, hint: str) -> None:
        """A Violation naming the worst component if ``gradient`` is not the estimate's."""
        gradient = expect_tensor(what, gradient, tuple(self.estimate.shape))
        excess = (gradient - self.estimate).abs() / (ERROR_MULTIPLE * self.error)
        if bool((excess <= 1).all()):
            return
        index = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        place = f"particle {index[0]}" + (f", row {index[1]}" if self.per_row else "")
        raise Violation(
            f"{what} is not the gradient of {of}: at {place}, coordinate {index[-1]} it is "
            f"{float(gradient[index]):.6g} where central differences give "
            f"{float(self.estimate[index]):.6g} ± {float(self.error[index]):.2g}. {hint}"
        )


def likelihood_terms(model: Model, rows: Rows, weight: float = 1.0) -> Terms:
    return lambda theta: weight * model.log_likelihood(theta, rows.x, rows.y)


def check_grad_log_prior(model: Model, generator: torch.Generator) -> str:
    theta = model.sample_prior(3, generator)
    difference = Difference(lambda t: model.log_prior(t)[:, None], theta)
    difference.compare("grad_log_prior(θ)", model.grad_log_prior(theta), "log_prior",
                       "Fix the override, or delete it: autograd of log_prior is the default.")
    return "grad_log_prior matches central differences of log_prior at 3 prior draws"


def check_grad_log_likelihood(model: Model, rows: Rows, generator: torch.Generator) -> str:
    theta = model.sample_prior(3, generator)
    difference = Difference(likelihood_terms(model, rows, ROW_WEIGHT), theta)
    of = f"{ROW_WEIGHT} × Σ_r log_likelihood"
    hint = ("Fix the override, or delete it: autograd of log_likelihood is the default. (The "
            f"sum is weighted by row_weight = {ROW_WEIGHT} here.)")
    difference.compare(f"grad_log_likelihood(θ, x, y, row_weight={ROW_WEIGHT})",
                       model.grad_log_likelihood(theta, rows.x, rows.y, ROW_WEIGHT), of, hint)
    value, gradient = model.log_likelihood_and_grad(theta, rows.x, rows.y, ROW_WEIGHT)
    what = f"log_likelihood_and_grad(θ, x, y, row_weight={ROW_WEIGHT})"
    if difference.value_gap(expect_tensor(f"{what}[0]", value, (3,))):
        raise Violation(f"{what}[0] is not {of}: it must return the weighted sum itself "
                        "beside its gradient")
    difference.compare(f"{what}[1]", gradient, of, hint)
    return ("grad_log_likelihood and log_likelihood_and_grad match central differences of "
            f"log_likelihood on {rows.count} rows at 3 prior draws")


def check_row_gradients(model: Model, rows: Rows, generator: torch.Generator) -> str:
    theta = model.sample_prior(3, generator)
    few = rows.slice(0, min(ROW_GRADIENT_ROWS, rows.count))
    difference = Difference(likelihood_terms(model, few), theta, per_row=True)
    rows_gradient = model.row_grad_log_likelihood(theta, few.x, few.y)
    hint = "Fix the override, or delete it: autograd over rows is the default."
    difference.compare("row_grad_log_likelihood(θ, x, y)", rows_gradient,
                       "each row's log_likelihood", hint)
    matrix = torch.randn(model.param_dim, 2, generator=generator, dtype=theta.dtype)
    anchor = model.sample_prior(1, generator)[0]
    anchored = model.row_grad_log_likelihood(torch.cat([theta, anchor[None]]), few.x, few.y)
    for given, expected in (
        (None, rows_gradient @ matrix),
        (anchor, (anchored[:-1] - anchored[-1:]) @ matrix),
    ):
        product = expect_tensor("row_grad_log_likelihood_times(θ, x, y, A, anchor)",
                                model.row_grad_log_likelihood_times(theta, few.x, few.y, matrix,
                                                                    given),
                                tuple(expected.shape))
        if not close(product, expected, (anchored.abs() @ matrix.abs()).amax()):
            raise Violation("row_grad_log_likelihood_times is not (∇ℓ_r(θ) − ∇ℓ_r(anchor)) A "
                            f"({'with' if given is not None else 'without'} an anchor): fix "
                            "the override, or delete it")
    return f"row gradients match central differences on {few.count} rows at 3 prior draws"
