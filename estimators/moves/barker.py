"""The minibatch Barker acceptance test with a correction variable (Seita et al. 2017).

Barker's rule accepts with probability S(Δ) = 1/(1 + e^{−Δ}), Δ the log acceptance ratio, which
is the same as accepting when Δ + X_log > 0 with X_log standard logistic. With a minibatch
estimate Δ* ~ N(Δ, σ²), σ² ≤ 1 (CLT), the test

    accept  ⇔  Δ* + X_nc + X_corr > 0,    X_nc ~ N(0, 1 − σ²),    X_corr ~ C,

is Barker's rule up to the error of N(0, 1) ⊛ C ≈ logistic (Seita et al., sec. 4). The minibatch
grows (doubling) while the estimated σ² is above 1; if it would reach the data size (or σ² would
stay above 1 even with every row), the sum is taken over every row and σ² = 0. C is a
distribution on a grid whose weights solve a Tikhonov-regularised, non-negative least-squares
deconvolution of the logistic CDF.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows

# (active particle indices (A,), rows (R)) -> per-row terms (A, R) whose sum over all rows,
# plus the exact part, is the log acceptance ratio Δ of each active particle.
RowTerms = Callable[[Tensor, Rows], Tensor]

FULL_PASS_BLOCK_ROWS = 65536


class CorrectionTable(NamedTuple):
    values: Tensor  # (K,) support points of X_corr
    probabilities: Tensor  # (K,) their probabilities


def build_correction_table(
    points: int = 201,
    half_width: float = 10.0,
    fit_points: int = 1201,
    fit_half_width: float = 20.0,
    regularisation: float = 1e-8,
) -> CorrectionTable:
    """Weights p ≥ 0 on ``points`` equally spaced values c_j in [−half_width, half_width] with

        min_p Σ_i (Σ_j Φ(y_i − c_j) p_j − S(y_i))² + λ Σ_j p_j²

    over ``fit_points`` equally spaced y_i in [−fit_half_width, fit_half_width] (Φ the normal,
    S the logistic CDF, λ = ``regularisation``), solved as non-negative least squares on the
    augmented system [A; √λ I] p = [S; 0], then normalised: the non-negativity constraint matters,
    as clipping an unconstrained solution leaves a far larger CDF gap (benchmarks/README.md).
    """
    # Imported here: scipy.optimize adds ~0.6 s to every import of ``estimators`` otherwise,
    # and the table is built once per process, on the first corrected move.
    from scipy.optimize import nnls

    values = np.linspace(-half_width, half_width, points)
    where = np.linspace(-fit_half_width, fit_half_width, fit_points)
    design = torch.special.ndtr(torch.from_numpy(where[:, None] - values[None])).numpy()
    target = 1.0 / (1.0 + np.exp(-where))
    augmented = np.vstack([design, math.sqrt(regularisation) * np.eye(points)])
    weights, _residual = nnls(
        augmented, np.concatenate([target, np.zeros(points)]), maxiter=50 * points
    )
    weights = weights / weights.sum()
    return CorrectionTable(torch.from_numpy(values), torch.from_numpy(weights))


@functools.cache
def correction_table() -> CorrectionTable:
    """The default table, computed once per process (a few hundredths of a second)."""
    return build_correction_table()


def max_cdf_gap(table: CorrectionTable, half_width: float = 30.0, points: int = 60001) -> float:
    """sup_y |P(Z + X_corr ≤ y) − S(y)|, Z ~ N(0, 1), on a fine grid over [−half_width, half_width]
    (beyond ±30 both CDFs are within 1e-13 of 0 or 1)."""
    where = torch.linspace(-half_width, half_width, points, dtype=torch.float64)
    convolved = torch.special.ndtr(where[:, None] - table.values[None]) @ table.probabilities
    return float((convolved - torch.sigmoid(where)).abs().max())


def sample_correction(table: CorrectionTable, count: int, generator: torch.Generator) -> Tensor:
    index = torch.multinomial(table.probabilities, count, replacement=True, generator=generator)
    return table.values[index]


class BarkerResult(NamedTuple):
    accept: Tensor  # (M,) bool
    rows: Tensor  # (M,) int64: data rows the test read for each particle
    log_ratio: Tensor  # (M,) Δ*: the estimate of Δ the decision used
    variance: Tensor  # (M,) its estimated variance (0 after a full pass)


def barker_test(
    exact: Tensor,
    row_terms: RowTerms,
    data: History,
    batch_size: int,
    generator: torch.Generator,
    table: CorrectionTable | None = None,
) -> BarkerResult:
    """Barker decisions for M proposals whose log ratio is Δ = exact + Σ_{i ≤ n} d_i.

    The rows are drawn uniformly with replacement, so Δ* = exact + n·mean(d_B) is unbiased with
    variance n² s²/|B| (s² the sample variance of d_B). All particles share each stage's rows;
    a particle leaves the loop once its σ² ≤ 1.
    """
    table = correction_table() if table is None else table
    m, n, device = exact.shape[0], len(data), exact.device
    table = CorrectionTable(*(part.to(device) for part in table))
    estimate, variance = exact.clone(), torch.zeros_like(exact)
    rows = torch.zeros(m, dtype=torch.int64, device=device)
    active = torch.arange(m, device=device)
    total, squares = torch.zeros_like(exact), torch.zeros_like(exact)
    full_pass = torch.zeros(m, dtype=torch.bool, device=device)
    drawn, size = 0, max(batch_size, 2)
    while n > 0 and active.numel() > 0 and drawn + size < n:
        terms = row_terms(active, data.sample(size, generator))
        total[active] += terms.sum(-1)
        squares[active] += (terms * terms).sum(-1)
        drawn += size
        rows[active] += size
        mean = total[active] / drawn
        row_variance = ((squares[active] - drawn * mean * mean) / (drawn - 1)).clamp_min(0.0)
        estimate[active] = exact[active] + n * mean
        variance[active] = n * n * row_variance / drawn
        undecided = variance[active] > 1.0
        # Even b = n rows would leave Var Δ* = n s² > 1: go straight to the exact sum.
        hopeless = undecided & (n * row_variance > 1.0)
        full_pass[active[hopeless]] = True
        active = active[undecided & ~hopeless]
        size = drawn
    full_pass[active] = n > 0
    if bool(full_pass.any()):
        chosen = full_pass.nonzero()[:, 0]
        full = torch.zeros(chosen.numel(), dtype=exact.dtype, device=device)
        for block in data.blocks(FULL_PASS_BLOCK_ROWS):
            full += row_terms(chosen, block).sum(-1)
        estimate[chosen] = exact[chosen] + full
        variance[chosen] = 0.0
        rows[chosen] += n
    noise = torch.randn(m, generator=generator, dtype=exact.dtype, device=device)
    noise = noise * (1.0 - variance).sqrt()
    correction = sample_correction(table, m, generator).to(exact.dtype)
    accept = estimate + noise + correction > 0.0  # NaN compares False: rejected
    return BarkerResult(accept, rows, estimate, variance)
