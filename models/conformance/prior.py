"""Do sample_prior's draws follow exp(log_prior), and does exp(log_prior) integrate to one?

Draws against the density: Stein's identity. For θ ~ p and any bounded smooth f with bounded
derivative, E[∂_j f(θ) + f(θ) ∂_j log p(θ)] = 0 (Stein 1972; Gorham & Mackey 2015). Two test
functions per coordinate: f = 1 gives E[∂_j log p] = 0, which a shifted sampler breaks, and
f = tanh((θ_k − c_k)/s_k), centred and scaled on pilot draws, gives for every pair (j, k)
E[∂_j log p · tanh(u_k)] + δ_jk E[sech²(u_k)] / s_k = 0, which a sampler too wide or too narrow,
or with the wrong correlations, breaks. The score is log_prior's own autograd gradient, whatever
grad_log_prior says (the gradient checks judge that). Bounded test functions keep every
statistic's variance finite wherever the prior's Fisher information is (heavy-tailed priors
included), so each mean over the draws is judged by its z-score against its own Monte Carlo
standard error, at the threshold that keeps the false-alarm rate over all D + D² statistics at
``FALSE_ALARM_RATE``.

Normalisation: bridge sampling (Meng & Wong 1996) between exp(log_prior) and a proposal q with
the mean and shrunk covariance of the prior's draws. With the geometric bridge,
∫ exp(log_prior) = E_q[(p/q)^½] / E_p[(q/p)^½], the means taken over draws of q and of
sample_prior (which the Stein check verifies follow p). Each ratio's second moment is ∫ p or
∫ q, so where the prior is normalised their variances are known exactly from the Bhattacharyya
coefficient the two means estimate: the test's standard error needs no sample variance, which
heavy-tailed ratios would understate. log Ẑ is judged at the one-statistic threshold.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.smc.covariance import shrunk_covariance
from modelcompare.models.base import Model
from modelcompare.models.conformance.contract import expect_tensor
from modelcompare.models.conformance.findings import Skipped, Violation, critical_z

PILOT_DRAWS = 1024  # fix the test functions' centres and scales
TEST_DRAWS = 4096
DOF = 3  # degrees of freedom of the proposal's Student-t half
# The normalisation check must see a missing −½ log 2π ≈ 0.92 nats (one normal coordinate's
# constant, the usual slip); where it cannot resolve that much it says so instead of passing.
RESOLUTION = 0.5 * math.log(2 * math.pi)
SAME_SCALE = (
    "Make sample_prior and log_prior describe one distribution on one scale: a constrained "
    "parameter is sampled on its unconstrained scale (log σ, logit p), and log_prior is the "
    "density of that unconstrained value, the constrained density plus the log-Jacobian "
    "(log σ for σ = exp(θ))"
)


def draws(model: Model, count: int, generator: torch.Generator) -> Tensor:
    return expect_tensor(f"sample_prior({count}, generator)",
                         model.sample_prior(count, generator), (count, model.param_dim))


def autograd_score(model: Model, theta: Tensor) -> Tensor:
    """∇ log_prior by autograd (Model's default), not the model's own grad_log_prior."""
    return expect_tensor("the autograd gradient of log_prior", Model.grad_log_prior(model, theta),
                         tuple(theta.shape))


def z_scores(mean: Tensor, variance: Tensor, count: int) -> Tensor:
    """mean / its standard error; a zero-variance statistic is 0 when its mean is, else ∞."""
    error = torch.sqrt(variance.clamp_min(0.0) / count)
    infinite = torch.where(mean == 0, 0.0, math.inf)
    return torch.where(error > 0, mean / error.clamp_min(1e-300), infinite)


class SteinStatistics(NamedTuple):
    """Means over the draws and their z-scores: the score's (D,), and the tanh identities'
    (D, D), entry [j, k] for ∂_j log p against the test function of θ_k."""

    score_mean: Tensor
    score_z: Tensor
    cross_mean: Tensor
    cross_z: Tensor


def stein_statistics(theta: Tensor, score: Tensor, centre: Tensor, scale: Tensor
                     ) -> SteinStatistics:
    """The statistics of draws ``theta`` (n, D) with the density's score at them."""
    bounded = torch.tanh((theta - centre) / scale)
    slope = (1.0 - bounded**2) / scale
    n = theta.shape[0]
    score_mean = score.mean(0)
    cross_mean = score.T @ bounded / n + torch.diag(slope.mean(0))
    cross_second = (score**2).T @ bounded**2 / n + torch.diag(
        (2.0 * score * bounded * slope + slope**2).mean(0))
    return SteinStatistics(score_mean, z_scores(score_mean, score.var(0), n),
                           cross_mean, z_scores(cross_mean, cross_second - cross_mean**2, n))


def check_prior_draws(model: Model, generator: torch.Generator) -> str:
    """Stein's identity under sample_prior's draws, for the score of log_prior."""
    pilot = draws(model, PILOT_DRAWS, generator)
    centre = pilot.median(0).values
    quartiles = torch.quantile(pilot, torch.tensor([0.25, 0.75], dtype=pilot.dtype), dim=0)
    scale = (quartiles[1] - quartiles[0]) / 1.349  # the interquartile range of N(0, 1) is 1.349
    if bool((scale <= 0).any()):
        j = int((scale <= 0).nonzero()[0])
        raise Violation(f"sample_prior's coordinate {j} is constant in most draws: a prior is a "
                        "density over every coordinate; drop a fixed parameter from θ")
    theta = draws(model, TEST_DRAWS, generator)
    score_mean, score_z, cross_mean, cross_z = stein_statistics(
        theta, autograd_score(model, theta), centre, scale)
    n, d = theta.shape
    limit = critical_z(d + d * d)
    worst_score, worst_cross = int(score_z.abs().argmax()), int(cross_z.abs().argmax())
    largest = max(float(score_z.abs().max()), float(cross_z.abs().max()))
    if largest <= limit:
        return (f"Stein's identity holds on {n} draws: {d + d * d} statistics, largest |z| "
                f"{largest:.2f} (limit {limit:.2f})")
    if abs(float(score_z[worst_score])) > limit:
        j = worst_score
        found = (f"the mean score E[∂_{j} log_prior] over the draws is "
                 f"{float(score_mean[j]):.4g}, z = {float(score_z[j]):.1f}, where it is 0 under "
                 f"exp(log_prior): the draws sit off-centre")
    else:
        j, k = divmod(worst_cross, d)
        slope = f" + sech²(u_{k})/s_{k}" if j == k else ""
        found = (f"Stein's identity E[∂_{j} log_prior · tanh(u_{k}){slope}] = 0, u = (θ − c)/s "
                 f"centred and scaled on pilot draws, reads {float(cross_mean[j, k]):.4g}, "
                 f"z = {float(cross_z[j, k]):.1f}: the draws are too wide, too narrow or wrongly "
                 "correlated for the density")
    detail = (f"(the draws of coordinate {j} have mean {float(theta[:, j].mean()):.4g} and "
              f"standard deviation {float(theta[:, j].std()):.4g})")
    raise Violation(f"sample_prior does not draw from exp(log_prior): {found} {detail}; the "
                    f"limit is |z| ≤ {limit:.2f}. {SAME_SCALE}.")


def check_prior_normalised(model: Model, generator: torch.Generator) -> str:
    """∫ exp(log_prior(θ)) dθ = 1, by a geometric bridge to a proposal fitted to the draws."""
    log_mass, error = prior_log_mass(model, generator)
    limit = critical_z(1)
    if limit * error > RESOLUTION:
        raise Skipped(f"inconclusive: a normal fits the prior too poorly in {model.param_dim} "
                      f"dimensions to see an error below {limit * error:.2g} nats")
    if abs(log_mass) <= limit * error:
        return (f"log ∫ exp(log_prior) = {log_mass:.2g} ± {error:.2g} (|z| ≤ {limit:.2f} "
                "passes)")
    raise Violation(
        f"exp(log_prior) integrates to exp({log_mass:.4g} ± {error:.2g}), not 1: log_prior "
        "lacks a normalising constant (−½ log 2πσ² per normal coordinate, −log B(α, β) for a "
        "Beta) or a log-Jacobian term. Every log Z shifts by that constant, so comparisons with "
        f"other models are off by it. {SAME_SCALE}."
    )


def prior_log_mass(model: Model, generator: torch.Generator) -> tuple[float, float]:
    """log ∫ exp(log_prior), and its standard error if that is 0 (a normalised prior)."""
    pilot = draws(model, TEST_DRAWS, generator)
    d = model.param_dim
    location = pilot.mean(0)
    covariance = shrunk_covariance(torch.cov(pilot.T).reshape(d, d), TEST_DRAWS)
    factor, info = torch.linalg.cholesky_ex(covariance)
    if int(info) != 0:
        raise Skipped("the prior's draws are degenerate (singular covariance)")
    proposal = Proposal(location, factor)
    both = torch.cat([proposal.sample(TEST_DRAWS, generator),
                      draws(model, TEST_DRAWS, generator)])
    log_prior = model.log_prior(both)
    if bool(torch.isnan(log_prior).any()) or bool((log_prior == math.inf).any()):
        raise Violation("log_prior is NaN or +∞ at some θ near the prior's draws: it must be a "
                        "log density everywhere (−∞ outside the support)")
    half_log_ratio = 0.5 * (log_prior - proposal.log_density(both))
    log_upper = log_mean_exp(half_log_ratio[:TEST_DRAWS])  # log E_q[(p/q)^½] = log BC + ½ log Z
    log_lower = log_mean_exp(-half_log_ratio[TEST_DRAWS:])  # log E_p[(q/p)^½] = log BC − ½ log Z
    overlap = min(math.exp(log_upper + log_lower), 1.0)  # BC², BC the Bhattacharyya coefficient
    # Where Z = 1 each ratio's second moment is ∫ q = 1 or ∫ p = 1, so each mean's variance is
    # (1 − BC²)/n exactly, and log Ẑ's is twice the relative one: no sample variance to trust.
    return log_upper - log_lower, math.sqrt(2.0 * (1.0 - overlap) / (TEST_DRAWS * overlap))


class Proposal:
    """The equal mixture of a normal and a Student-t with 3 degrees of freedom, one location and
    scale: the t's tails cover skewed and heavy-tailed priors, the normal fits the rest."""

    def __init__(self, location: Tensor, factor: Tensor) -> None:
        self.location, self.factor = location, factor

    def sample(self, count: int, generator: torch.Generator) -> Tensor:
        """Half from each component (a stratified draw from the mixture)."""
        d, half = self.location.shape[0], count // 2
        normal = torch.randn(count, d, generator=generator, dtype=self.location.dtype)
        chi2 = torch.randn(count - half, DOF, generator=generator, dtype=normal.dtype).pow(2)
        normal[half:] *= torch.sqrt(DOF / chi2.sum(-1))[:, None]
        return self.location + normal @ self.factor.T

    def log_density(self, theta: Tensor) -> Tensor:
        d = self.location.shape[0]
        white = torch.linalg.solve_triangular(self.factor, (theta - self.location).T,
                                              upper=False).T
        distance = (white**2).sum(-1)
        log_det = float(self.factor.diagonal().log().sum())
        log_normal = -0.5 * distance - 0.5 * d * math.log(2 * math.pi) - log_det
        log_t = (math.lgamma((DOF + d) / 2) - math.lgamma(DOF / 2)
                 - 0.5 * d * math.log(DOF * math.pi) - log_det
                 - 0.5 * (DOF + d) * torch.log1p(distance / DOF))
        return torch.logaddexp(log_normal, log_t) - math.log(2.0)


def log_mean_exp(values: Tensor) -> float:
    return float(torch.logsumexp(values, 0)) - math.log(values.shape[0])
