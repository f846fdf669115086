"""The tempered target of one piece of a chunk, and its gradient with control variates.

log π_λ(θ) = λ·log p(chunk|θ) + Σ_{i≤n} log p(y_i|θ) + log p(θ)   (design doc, step 4).
The past-data sum is exact while the history fits in a minibatch; beyond that it is the
control-variate estimate (Baker et al. 2019, eq. 6)
    Σ_i ∇ℓ_i(θ_a) + (n/|B|) Σ_{b∈B} [∇ℓ_b(θ) − ∇ℓ_b(θ_a)],
or the plain minibatch estimate (n/|B|) Σ_b ∇ℓ_b(θ) without control variates. The anchor θ_a is a
point near the posterior; Σ_i ∇ℓ_i(θ_a) over *all* past rows is kept current chunk by chunk.
SGHMC reads a piece of more than ``piece_batch_size`` rows the same way, as a second stratum
(``sampled_strata``): λ Σ_r ∇ℓ_r(θ_a) + (λc/|C|) Σ_{r∈C} [∇ℓ_r(θ) − ∇ℓ_r(θ_a)].
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows, RowsHistory, cat_rows
from modelcompare.estimators.online import precision
from modelcompare.estimators.online.gaussian_start import Bridge, GaussianReference
from modelcompare.models import Model, WeightedRows, WeightedSum


class Anchor(NamedTuple):
    point: Tensor  # (D,)
    grad_sum: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)
    piece_grad: Tensor | None = None  # (D,) Σ over the piece's rows of ∇ log p(y_r | θ_a)


def with_piece(model: Model, anchor: Anchor, rows: Rows) -> Anchor:
    """``anchor`` knowing the gradient at θ_a of the piece ``rows`` about to be annealed in."""
    return anchor._replace(
        piece_grad=model.grad_log_likelihood(anchor.point[None], rows.x, rows.y)[0]
    )


class PastData(NamedTuple):
    """How the past enters the gradient: all rows (small n) or minibatches of a history."""

    history: History
    full: Rows | None  # every past row while the history is small enough to use in full
    batch_size: int
    anchor: Anchor | None  # None: plain minibatch gradients


class Piece(NamedTuple):
    """A piece of a chunk being annealed in, and the past it is conditioned on; with a
    ``reference``, the first piece of a stream annealed in from it (``gaussian_start``)."""

    model: Model
    rows: Rows
    past: PastData
    reference: GaussianReference | None = None

    @property
    def past_in_full(self) -> bool:
        """Whether the exact target can be evaluated (every past row at hand, or none)."""
        return self.past.full is not None or len(self.past.history) == 0

    def log_likelihood(self, theta: Tensor) -> Tensor:
        """log p(piece | θ) per particle (M,), from a reference q: log p(piece | θ) p(θ) / q(θ)."""
        value = self.model.log_likelihood(theta, self.rows.x, self.rows.y).sum(-1)
        if self.reference is None:
            return value
        return value + self.model.log_prior(theta) - self.reference.log_density(theta)


def anchor_at(model: Model, point: Tensor, history: History, block_rows: int = 65536) -> Anchor:
    """A control-variate anchor: one full pass over the history at ``point``."""
    total = torch.zeros_like(point)
    for rows in history.blocks(block_rows):
        total += model.grad_log_likelihood(point[None], rows.x, rows.y)[0]
    return Anchor(point, total)


def anchor_at_mean(
    model: Model, particles: Tensor, log_weights: Tensor, history: History
) -> Anchor:
    """``anchor_at`` the weighted particle mean."""
    return anchor_at(model, torch.softmax(log_weights, 0) @ particles, history)


def past_data(
    history: History, full_batch_rows: int, batch_size: int, anchor: Anchor | None
) -> PastData:
    if len(history) <= full_batch_rows:
        full = cat_rows(list(history.blocks(max(len(history), 1)))) if len(history) else None
        return PastData(history, full, batch_size, None)
    return PastData(history, None, batch_size, anchor)


class ExactTarget(NamedTuple):
    """log π_λ(θ) and its gradient, exactly: only while the past is used in full. ``grad`` alone
    (the leapfrog's inner steps) may compute in a lower precision (``precision``)."""

    model: Model
    likelihood: WeightedSum | None  # λ × the piece plus the past; None: the prior alone
    steering: WeightedSum | None  # the same sum in the gradients' dtype
    bridge: Bridge | None = None  # (1 − λ) of the base is a reference q's (``gaussian_start``)

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        value, grad = self.model.log_prior(theta), self.model.grad_log_prior(theta)
        if self.bridge is not None:
            value, grad = self.bridge.value_and_grad(theta, value, grad)
        if self.likelihood is None:
            return value, grad
        part_value, part_grad = self.likelihood.value_and_grad(theta)
        return value + part_value, grad + part_grad

    def grad(self, theta: Tensor) -> Tensor:
        grad = self.model.grad_log_prior(theta)
        if self.bridge is not None:
            grad = self.bridge.grad(theta, grad)
        return grad if self.steering is None else grad + self.steering.grad(theta)


def exact_target(
    model: Model,
    chunk: Rows,
    temperature: float,
    past: PastData,
    dtype: torch.dtype,
    reference: GaussianReference | None = None,
) -> ExactTarget:
    """The exact tempered target at ``temperature``, its rows prepared once for many θ; ``grad``
    computes in ``dtype``. From a ``reference`` q the base is p(θ)^λ q(θ)^(1−λ)."""
    if len(past.history) > 0 and past.full is None:
        raise ValueError("the exact tempered target needs the full past data")
    bridge = None if reference is None else Bridge(reference, 1.0 - temperature)
    parts = [(chunk.x, chunk.y, temperature)] if temperature > 0.0 else []
    if past.full is not None:
        parts.append((past.full.x, past.full.y, 1.0))
    if not parts:
        return ExactTarget(model, None, None, bridge)
    likelihood = model.weighted_sum(parts)
    steering = precision.weighted_sum(model, parts, dtype, likelihood)
    return ExactTarget(model, likelihood, steering, bridge)


def grad_log_target(
    model: Model,
    theta: Tensor,
    chunk: Rows,
    temperature: float,
    past: PastData,
    generator: torch.Generator,
) -> Tensor:
    """Minibatch estimate of ∇ log π_λ(θ); the full-past case is ``log_target``'s (exact HMC)."""
    batch = past.history.sample(past.batch_size, generator)
    return minibatch_grad_log_target(model, theta, chunk, temperature, past, batch)


class Stratum(NamedTuple):
    """Rows a minibatch gradient reads in minibatches of ``batch_size`` rows drawn uniformly with
    replacement from ``source``, each row's log-likelihood weighing ``weight`` in the target."""

    source: History
    weight: float
    batch_size: int

    @property
    def total(self) -> float:
        """The stratum's whole weight in the target: weight · N, N its rows."""
        return self.weight * len(self.source)

    @property
    def draw_weight(self) -> float:
        """A drawn row's weight in the unbiased estimate of the stratum's sum: weight · N/|B|."""
        return self.total / self.batch_size


def sampled_strata(
    chunk: Rows, temperature: float, past: PastData, piece_batch_size: int
) -> tuple[list[WeightedRows], list[Stratum]]:
    """How a minibatch gradient reads log π_λ's rows: what it sums in full, and its strata. The
    past is read in minibatches; the piece (weight λ) in full while it has no more than
    ``piece_batch_size`` rows, else in minibatches of that size with the same control variate
    (its rows' gradient at θ_a is the anchor's ``piece_grad``)."""
    minibatch_past(past)
    strata = [Stratum(past.history, 1.0, past.batch_size)]
    if temperature <= 0.0:
        return [], strata
    if chunk.count <= piece_batch_size:
        return [(chunk.x, chunk.y, temperature)], strata
    return [], [Stratum(RowsHistory(chunk), temperature, piece_batch_size), *strata]


def minibatch_rows(
    source: History, batch_size: int, count: int, generator: torch.Generator
) -> Rows:
    """``count`` minibatches of ``source`` drawn in one go, back to back: a history's draws are
    independent in the order it returns them (``History.sample``), so the same law as ``count``
    separate draws."""
    return source.sample(count * batch_size, generator)


def minibatch_gradients(
    piece: Piece,
    fixed: list[WeightedRows],
    strata: list[Stratum],
    temperature: float,
    count: int,
    generator: torch.Generator,
    dtype: torch.dtype,
) -> list[Callable[[Tensor], Tensor]]:
    """``grad_log_target`` of ``count`` steps (``sampled_strata``'s ``fixed`` rows and
    ``strata``), step i on the i-th minibatch of every stratum, their rows prepared together;
    the likelihood's arithmetic in ``dtype`` (``precision``)."""
    streams = []
    for stratum in strata:
        rows = minibatch_rows(stratum.source, stratum.batch_size, count, generator)
        streams.append((rows.x, rows.y, stratum.draw_weight))
    sums = precision.stepwise_sums(piece.model, fixed, streams, count, dtype)
    anchor = piece.past.anchor
    return [functools.partial(anchored_gradient, piece.model, temperature, anchor, s) for s in sums]


def minibatch_grad_log_target(
    model: Model, theta: Tensor, chunk: Rows, temperature: float, past: PastData, batch: Rows
) -> Tensor:
    """``grad_log_target`` on a given minibatch ``batch`` of the past."""
    minibatch_past(past)
    parts = [(batch.x, batch.y, len(past.history) / batch.count)]
    if temperature > 0.0:
        parts.insert(0, (chunk.x, chunk.y, temperature))
    return anchored_gradient(model, temperature, past.anchor, model.weighted_sum(parts), theta)


def minibatch_past(past: PastData) -> None:
    if past.full is not None or len(past.history) == 0:
        raise ValueError("minibatch gradients are for a past too large to use in full")


def anchored_gradient(
    model: Model, temperature: float, anchor: Anchor | None, likelihood: WeightedSum, theta: Tensor
) -> Tensor:
    """The prior's gradient plus ``likelihood``'s (λ × the piece, n/|B| × a minibatch), with
    the control variate of ``anchor`` when there is one."""
    grad = model.grad_log_prior(theta)
    if anchor is None:
        return grad + likelihood.grad(theta)
    # The anchor rides along as one more particle: one pass over piece and minibatch. Its row
    # holds λ·(the piece's gradient at θ_a) too, which the anchor's ``piece_grad`` takes back out.
    both = likelihood.grad(with_anchor(theta, anchor))
    at_anchor = both[-1]
    if temperature > 0.0:
        if anchor.piece_grad is None:
            raise ValueError("the anchor lacks the piece's gradient at θ_a (``with_piece``)")
        at_anchor = at_anchor - temperature * anchor.piece_grad
    return grad + both[:-1] + (anchor.grad_sum - at_anchor)


def with_anchor(theta: Tensor, anchor: Anchor) -> Tensor:
    """The particles (M, D) with the anchor point appended as row M."""
    return torch.cat([theta, anchor.point[None]])


def gradient_noise(
    model: Model,
    theta: Tensor,
    strata: list[Stratum],
    anchor: Anchor | None,
    generator: torch.Generator,
    scale: Tensor,
    rows: int,
) -> Tensor:
    """A factor G L (M, B, D) of Lᵀ(the covariance of a minibatch gradient over ``strata``)L at
    each particle, L = ``scale`` (the SGHMC mass factor: the noise in whitened units), from
    about ``rows`` fresh rows, computed in θ's dtype (``precision``).

    A stratum of N rows of weight w read |B| at a time contributes (wN/|B|) Σ_b d_b, with
    d_b = ∇ℓ_b(θ) − ∇ℓ_b(θ_a) (or ∇ℓ_b(θ) without an anchor) and rows drawn with replacement,
    so its covariance is ((wN)²/|B|) Cov(d). k fresh rows of the stratum estimate Cov(d) per
    particle, and G = wN (|B|(k − 1))^(-1/2) (d − d̄) gives Gᵀ G = ((wN)²/|B|) · the sample
    covariance. Strata are independent: their factors are stacked (B = Σ k).
    """
    dtype = theta.dtype
    point = None if anchor is None else anchor.point.to(dtype)
    factors = []
    for stratum, size in zip(strata, noise_rows(strata, rows), strict=True):
        batch = stratum.source.sample(size, generator).in_dtype(dtype)
        scaled = scale.to(dtype) * (stratum.total / (stratum.batch_size * (size - 1)) ** 0.5)
        d = model.row_grad_log_likelihood_times(theta, batch.x, batch.y, scaled, point)
        factors.append(d - d.mean(1, keepdim=True))
    return torch.cat(factors, 1)


def noise_rows(strata: list[Stratum], rows: int) -> list[int]:
    """``rows`` split between the strata in proportion to the scale of their noise, wN/√|B|
    for equal Cov(d), at least 2 each: the estimate costs about what one stratum's would, and
    its rows go where the noise is (the past's, once n is well above the piece's λ·rows)."""
    shares = [s.total / s.batch_size**0.5 for s in strata]
    return [max(2, round(rows * share / sum(shares))) for share in shares]
