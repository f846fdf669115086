"""The weighted particle cloud's covariance factor: the mass matrix of the moves.

The sample covariance of M particles in D dimensions spreads its eigenvalues (Marchenko–Pastur:
from (1 − √c)² to (1 + √c)² times the truth, c = D / M), and a mass matrix that narrow in some
directions feeds back on itself: the moves barely move the particles there, the next resampling
narrows the cloud further, and a cloud narrower than the posterior makes log Ẑ read high, by
whole nats where D is a sizeable fraction of M (see docs/design/moves.md). The eigenvalues are
therefore shrunk by the analytical nonlinear shrinkage of Ledoit & Wolf (2020, "Analytical
nonlinear shrinkage of large-dimensional covariance matrices", Ann. Statist. 48, §4):
each sample eigenvalue λ is replaced by its estimated oracle value

    d(λ) = λ / |1 − c − c λ m̆(λ)|²,

with m̆ the Stieltjes transform of the limiting sample spectrum, estimated from the sample
eigenvalues by an Epanechnikov kernel with local bandwidth λ_j n^(-1/3): π f̃ and π H f̃ are its
imaginary and real parts (density and Hilbert transform). It is applied to the correlation
matrix, so that the coordinates' scales do not enter the shrinkage.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from modelcompare.estimators.errors import EstimatorError

# The kernel's support is ±√5 bandwidths and the bandwidth n^(-1/3) must stay below 1/√5 for the
# null eigenvalues' transform (D ≥ n) to exist: n ≥ 12 samples.
MIN_SHRINKAGE_SAMPLES = 12
RANK_TOLERANCE = 1e-6  # correlation eigenvalues below this × the largest count as null
SQRT5 = math.sqrt(5.0)


def particle_scale(theta: Tensor, log_weights: Tensor) -> Tensor:
    """Lower Cholesky factor L of the shrunk weighted particle covariance: (D, D).

    A full (not diagonal) factor: posteriors with non-identified directions (softmax weights)
    have marginal variances far above their conditional ones, and only the full covariance sees
    that.
    """
    return covariance_factor(weighted_covariance(theta, log_weights), theta.shape[0] - 1)


def weighted_covariance(theta: Tensor, log_weights: Tensor) -> Tensor:
    """The particles' covariance under their normalised weights: (D, D)."""
    weights = torch.softmax(log_weights, 0)
    centred = theta - weights @ theta
    return (centred * weights[:, None]).T @ centred


def covariance_factor(cov: Tensor, samples: int) -> Tensor:
    """Lower Cholesky factor of ``cov`` (from ``samples`` degrees of freedom) shrunk
    (``shrunk_covariance``); ``EstimatorError`` where it is not positive definite."""
    if torch.isfinite(cov).all():
        cov = shrunk_covariance(cov, samples=samples)
    factor, info = torch.linalg.cholesky_ex(cov)
    if int(info) != 0 or not torch.isfinite(factor).all():
        raise EstimatorError(
            "the particle covariance is not positive definite (particles diverged)"
        )
    return factor


def shrunk_covariance(cov: Tensor, samples: int) -> Tensor:
    """``cov`` (from ``samples`` degrees of freedom) with the eigenvalues of its correlation
    matrix shrunk (module docstring), or only jittered where fewer than ``MIN_SHRINKAGE_SAMPLES``
    samples or directions are left or the estimate fails (``trace_kept``). The relative jitter
    of 1e-9 (on the correlations, so that no coordinate's scale sets another's) keeps a cloud of
    coinciding particles movable.
    """
    variances = cov.diagonal()
    spread = float(variances.mean()) or 1.0  # a coordinate where every particle agrees
    scale = torch.where(variances > 0, variances, spread).sqrt()
    correlation = cov / scale[:, None] / scale[None, :]
    correlation = correlation + 1e-9 * torch.eye(
        cov.shape[0], dtype=cov.dtype, device=cov.device
    )
    if samples < MIN_SHRINKAGE_SAMPLES:
        return correlation * scale[:, None] * scale[None, :]
    eigenvalues, vectors = torch.linalg.eigh(correlation)
    # Coinciding particles (copies no move has separated) leave null directions; the kernel
    # estimates cancel catastrophically on eigenvalues far below the others, so the spectrum is
    # read as that of its numerical rank's worth of samples, the rest as null (the D ≥ n case).
    rank = int((eigenvalues > RANK_TOLERANCE * float(eigenvalues[-1])).sum())
    effective = samples if rank == eigenvalues.shape[0] else min(samples, rank)
    if effective >= MIN_SHRINKAGE_SAMPLES:
        shrunk = shrunk_eigenvalues(eigenvalues.clamp(min=0.0), effective)
        if trace_kept(shrunk, eigenvalues):
            correlation = (vectors * shrunk) @ vectors.T
            correlation = 0.5 * (correlation + correlation.T)
    return correlation * scale[:, None] * scale[None, :]


def trace_kept(shrunk: Tensor, eigenvalues: Tensor) -> bool:
    """Whether ``shrunk`` is a usable spectrum: finite, positive, and with the total variance of
    the sample's to within 2× (the shrinkage moves variance between directions, it does not make
    or lose it; a spectrum that did is a failed estimate, and the sample covariance is kept)."""
    if not (torch.isfinite(shrunk).all() and bool((shrunk > 0).all())):
        return False
    ratio = float(shrunk.sum() / eigenvalues.sum())
    return 0.5 <= ratio <= 2.0


def shrunk_eigenvalues(eigenvalues: Tensor, samples: int) -> Tensor:
    """Ledoit & Wolf (2020) oracle estimates for ascending sample ``eigenvalues`` (p,) from n =
    ``samples``: p < n, d = λ / ((π c λ f̃)² + (1 − c − π c λ H f̃)²); p ≥ n, the n largest
    (the nonzero ones) get λ / (π² λ² (f̃² + H f̃²)) and the p − n null ones a common value
    from the transform at 0."""
    p, n = eigenvalues.shape[0], samples
    bandwidth = n ** (-1.0 / 3.0)
    ratio = p / n
    if p < n:
        density, hilbert = kernel_transform(eigenvalues, bandwidth)
        return eigenvalues / (
            (math.pi * ratio * eigenvalues * density) ** 2
            + (1 - ratio - math.pi * ratio * eigenvalues * hilbert) ** 2
        )
    nonzero = eigenvalues[p - n :]
    density, hilbert = kernel_transform(nonzero, bandwidth)
    largest = nonzero / (math.pi**2 * nonzero**2 * (density**2 + hilbert**2))
    if p == n:
        return largest
    h = bandwidth
    hilbert_at_zero = (
        (3 / (10 * h**2) + 3 / (4 * SQRT5 * h) * (1 - 1 / (5 * h**2))
         * math.log((1 + SQRT5 * h) / (1 - SQRT5 * h)))
        * float((1 / nonzero).mean()) / math.pi
    )
    null = 1 / (math.pi * (p - n) / n * hilbert_at_zero)
    return torch.cat([torch.full((p - n,), null, dtype=eigenvalues.dtype,
                                 device=eigenvalues.device), largest])


def kernel_transform(eigenvalues: Tensor, bandwidth: float) -> tuple[Tensor, Tensor]:
    """The Epanechnikov kernel estimates of the sample spectrum's density f̃ and its Hilbert
    transform H f̃ at each eigenvalue, bandwidth ``bandwidth`` λ_j at eigenvalue j."""
    widths = bandwidth * eigenvalues[None, :]
    x = (eigenvalues[:, None] - eigenvalues[None, :]) / widths
    density = (3 / (4 * SQRT5)) * ((1 - x**2 / 5).clamp(min=0) / widths).mean(1)
    linear = (-3 / (10 * math.pi)) * x
    on_edge = (x.abs() - SQRT5).abs() < 1e-12
    log_ratio = torch.log(((SQRT5 - x) / (SQRT5 + x)).abs().where(~on_edge, torch.ones_like(x)))
    hilbert = linear + (3 / (4 * SQRT5 * math.pi)) * (1 - x**2 / 5) * log_ratio
    return density, (hilbert / widths).mean(1)
