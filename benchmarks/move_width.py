"""How wide SG-AIS's SGHMC move leaves a cloud that starts on the posterior.

A move that leaves the posterior invariant keeps a cloud drawn from it on it; one that samples a
slightly hotter or colder law widens or narrows it a little at every move, and at many
parameters a little per direction is a lot in log Z. An annealed piece's increment is
∫₀¹ E_λ[log p(piece | θ)] dλ (thermodynamic integration, the limit of many steps); for r rows
after n, a cloud whose variance is (1 + ε) times π_λ's in each of D whitened directions reads
each expectation ε D r / (2 (n + λ r)) low, so the piece −ε D log(1 + r/n) / 2: 1% at D = 161
is −0.08 nats per 500-row chunk at n = 5,000 (docs/design/moves.md, "The moves' width").

Two families (benchmarks/dimension.py's data set 0 unless ``--seed``): linear regression with
D − 1 inputs and a bias, whose posterior after ``--rows`` rows is N(μ, H⁻¹) exactly, and Poisson
regression with 100 inputs (101 parameters), whose posterior is not Gaussian: there μ and H are
the Laplace approximation's (``references.laplace_importance.find_mode``) and the cloud starts
from 60 exact HMC transitions on all the rows from it (mass H⁻¹), so it is drawn from the
posterior itself. M particles are moved ``--moves`` times by the SGHMC move of SG-AIS past its
exact phase, at λ = 0 of a 500-row piece, with its settings scaled to D (``online.dimension``)
and its pooled mass rule; after each move the cloud's width is the mean over particles of
(θ − μ)ᵀ H (θ − μ) / D. The reference is that of exact moves: 1 for the Gaussian posterior, and
for Poisson regression the same width along 40 more exact HMC moves (8 transitions each) from
the same start. The default move takes its mass from the clouds of the steps before
(``smc.mass``) and reads the past in minibatches scaled to D; the variants change one or two
things: the exact (or Laplace) covariance as the mass, the step's own cloud in the mass (the
rule before), the cloud resampled before each move (multinomially, on random weights: the
duplicates a selection leaves), the past's minibatch at its unscaled 100 rows or at twice the
scaled one, with and without the noise friction or its second-order term (``moves.sghmc``), and
a half or a quarter of the step with √2 or twice the steps.

    python benchmarks/move_width.py            # linear D = 161, 5,000 rows, and Poisson
                                               # D = 101, 3,000 rows; 110 moves
    python benchmarks/move_width.py --family poisson
    python benchmarks/move_width.py --quick    # linear D = 81, Poisson, 30 moves

Prints each variant's mean width after the first 10 moves, its standard error (batch means) and
its ratio to the reference's, and writes results/move_width.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, NamedTuple

import torch
from _common import environment, set_threads, table, write_json
from dimension import POISSON_INPUTS, chunks_of, model_of
from torch import Tensor

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.moves.hmc import HMCParams
from modelcompare.estimators.online.dimension import scaled_to_dimension
from modelcompare.estimators.online.kernels import exact_hmc, sghmc
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import (
    PastData,
    Piece,
    anchor_at,
    past_data,
    with_piece,
)
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, find_mode
from modelcompare.estimators.smc.covariance import covariance_factor
from modelcompare.estimators.smc.mass import NO_POOL, MassPool, MassRule, mass_rule, pooled_mass
from modelcompare.models import Model

PARTICLES, PIECE, BURN_IN, BATCHES = 64, 500, 10, 5
# the past's minibatch at D <= 44 (``online.dimension`` scales it by D / 44)
UNSCALED_BATCH = SGAISSettings().batch_size
# Poisson regression's exact draws: HMC transitions from the Laplace approximation, then moves
# of this many transitions for the reference width
BURN_IN_TRANSITIONS, REFERENCE_TRANSITIONS, REFERENCE_MOVES = 60, 8, 40
FAMILIES = ("linear", "poisson")
DEFAULT_ROWS = {"linear": 5_000, "poisson": 3_000}


class Variant(NamedTuple):
    name: str
    mass: str = "pool"  # "pool": the default rule; "own cloud": the step's cloud in the pool
    # it moves with (the rule before); "exact": the posterior (or Laplace) covariance
    batch: str = "scaled"  # the past's minibatch: "scaled" to D, "unscaled" (100), "doubled"
    noise_friction: bool = True
    estimate_variance: bool = True  # the noise friction's second-order term
    resampled: bool = False  # the cloud resampled before each move (duplicates)
    rate: float = 1.0  # the step η times this, the steps times its inverse square root


VARIANTS = (
    Variant("default"),
    Variant("exact mass", mass="exact"),
    Variant("own cloud in the mass", mass="own cloud"),
    Variant("resampled", resampled=True),
    Variant("resampled, own cloud in the mass", mass="own cloud", resampled=True),
    Variant("minibatch 100", batch="unscaled"),
    Variant("minibatch 100, noise friction off", batch="unscaled", noise_friction=False),
    Variant("minibatch × 2", batch="doubled"),
    Variant("noise friction off", noise_friction=False),
    Variant("no second-order friction term", estimate_variance=False),
    Variant("minibatch 100, no second-order term", batch="unscaled", estimate_variance=False),
    Variant("lr/2, √2 × steps", rate=0.5),
    Variant("lr/4, 2x steps", rate=0.25),
    Variant("lr/4, 2x steps, own cloud in the mass", mass="own cloud", rate=0.25),
)


class Posterior(NamedTuple):
    """Where the clouds start and what their width is measured against."""

    mean: Tensor  # (D,) μ
    precision: Tensor  # (D, D) H
    factor: Tensor  # (D, D) L, L Lᵀ = H⁻¹
    draws: Tensor  # (M, D) from the posterior
    width: float  # the reference width: 1 for a Gaussian posterior, else exact moves'
    stderr: float


def settings_of(variant: Variant, dim: int) -> SGAISSettings:
    scaled = scaled_to_dimension(SGAISSettings(), dim)
    update: dict[str, Any] = {"noise_friction": variant.noise_friction,
                              "noise_estimate_variance": variant.estimate_variance}
    if variant.batch != "scaled":
        update["batch_size"] = UNSCALED_BATCH if variant.batch == "unscaled" else (
            2 * scaled.batch_size)
    if variant.rate != 1.0:
        update |= {"lr": scaled.lr * variant.rate, "steps": round(scaled.steps / variant.rate**0.5)}
    return scaled.model_copy(update=update)


def own_cloud_mass(clouds: int) -> MassRule:
    """The pooled rule with the step's own cloud averaged in before the moves take it."""
    rule = pooled_mass(clouds)

    def with_own(theta: Tensor, log_weights: Tensor, pool: MassPool) -> tuple[Tensor, MassPool]:
        _, pooled = rule(theta, log_weights, pool)
        samples = round(1 / float(pooled.inverse_samples))
        return covariance_factor(pooled.covariance, samples), pooled

    return with_own


def width_of(theta: Tensor, mean: Tensor, precision: Tensor) -> float:
    offset = theta - mean
    return float(((offset @ precision) * offset).sum(-1).mean()) / theta.shape[1]


def batch_means(widths: list[float]) -> tuple[float, float]:
    """The mean of ``widths`` and its standard error from ``BATCHES`` batch means."""
    size = len(widths) // BATCHES
    means = [statistics.fmean(widths[i * size:(i + 1) * size]) for i in range(BATCHES)]
    return statistics.fmean(widths), statistics.stdev(means) / math.sqrt(BATCHES)


def linear_posterior(past: Rows, generator: torch.Generator) -> Posterior:
    """N(μ, H⁻¹) exactly (σ = τ = 1), and M draws from it."""
    design = torch.cat([past.x, torch.ones(past.count, 1, dtype=past.x.dtype)], 1)
    precision = torch.eye(design.shape[1], dtype=torch.float64) + design.T @ design
    mean = torch.linalg.solve(precision, design.T @ past.y)
    factor = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(precision)))
    draws = mean + torch.randn(PARTICLES, len(mean), generator=generator,
                               dtype=mean.dtype) @ factor.T
    return Posterior(mean, precision, factor, draws, 1.0, 0.0)


def sampled_posterior(model: Model, past: Rows, generator: torch.Generator) -> Posterior:
    """The Laplace approximation's μ and H, M draws moved from it onto the posterior by exact
    HMC on all the rows, and the width exact moves keep from there."""
    mode = find_mode(model, past, torch.zeros(model.param_dim, dtype=torch.float64),
                     LaplaceISSettings())
    mean, precision, factor = mode.location, mode.precision, mode.covariance_factor()
    piece = Piece(model, Rows(past.x[:0], past.y[:0]),
                  past_data(RowsHistory(past), past.count, UNSCALED_BATCH, None))
    exact = SGAISSettings()
    theta = mean + torch.randn(PARTICLES, len(mean), generator=generator,
                               dtype=mean.dtype) @ factor.T
    params = HMCParams(exact.hmc_step, exact.leapfrog_steps, BURN_IN_TRANSITIONS)
    theta = exact_hmc(piece, params, exact.gradient_precision)(
        theta, 0.0, factor, generator, lambda: None).particles
    draws, found = theta, []
    move = exact_hmc(piece, params._replace(transitions=REFERENCE_TRANSITIONS),
                     exact.gradient_precision)
    for _ in range(REFERENCE_MOVES):
        theta = move(theta, 0.0, factor, generator, lambda: None).particles
        found.append(width_of(theta, mean, precision))
    return Posterior(mean, precision, factor, draws, *batch_means(found))


def widths(family: str, variant: Variant, rows: int, moves: int, dim: int) -> dict[str, Any]:
    """The cloud's width after each move of ``variant`` (see the module docstring)."""
    set_threads(1)
    started = time.process_time()
    settings, model = settings_of(variant, dim), model_of(family, dim)
    chunks = chunks_of(family, dim, 0, rows + PIECE)
    x, y = torch.cat([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
    past, piece_rows = Rows(x[:rows], y[:rows]), Rows(x[rows:], y[rows:])
    generator = torch.Generator().manual_seed(1)
    posterior = (linear_posterior(past, generator) if family == "linear"
                 else sampled_posterior(model, past, generator))
    history = RowsHistory(past)
    anchor = with_piece(model, anchor_at(model, posterior.mean, history), piece_rows)
    piece = Piece(model, piece_rows, PastData(history, None, settings.batch_size, anchor))
    move = sghmc(piece, settings.sghmc, settings.gradient_precision)
    theta = posterior.draws
    log_weights = torch.full((PARTICLES,), -math.log(PARTICLES), dtype=x.dtype)
    rule = (own_cloud_mass if variant.mass == "own cloud" else mass_rule)(settings.mass_clouds)
    pool, found = NO_POOL, []
    for _ in range(moves):
        if variant.resampled:
            noisy = torch.softmax(torch.randn(PARTICLES, generator=generator, dtype=x.dtype), 0)
            theta = theta[torch.multinomial(noisy, PARTICLES, True, generator=generator)]
        scale, pool = rule(theta, log_weights, pool)
        theta = move(theta, 0.0, posterior.factor if variant.mass == "exact" else scale,
                     generator, lambda: None).particles
        found.append(width_of(theta, posterior.mean, posterior.precision))
    width, stderr = batch_means(found[BURN_IN:])
    return {"family": family, "variant": variant.name, "dim": dim, "rows": rows,
            "moves": moves,
            "settings": {k: getattr(settings, k) for k in (
                "lr", "steps", "batch_size", "noise_friction", "noise_estimate_variance",
                "mass_clouds")},
            "width": width, "stderr": stderr,
            "reference_width": posterior.width, "reference_stderr": posterior.stderr,
            "ratio": width / posterior.width,
            "widths": found, "cpu_seconds": time.process_time() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--family", choices=FAMILIES, action="append",
                        help="linear, poisson (default both)")
    parser.add_argument("--dim", type=int, default=None, help="linear regression's D")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--moves", type=int, default=None)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    moves = args.moves or (30 if args.quick else 110)
    dims = {"linear": args.dim or (81 if args.quick else 161), "poisson": POISSON_INPUTS + 1}
    jobs = [(family, variant, args.rows or DEFAULT_ROWS[family], moves, dims[family])
            for family in args.family or FAMILIES for variant in VARIANTS]
    with ProcessPoolExecutor(args.processes) as pool:
        runs = list(pool.map(widths, *zip(*jobs, strict=True)))
    for family in dict.fromkeys(r["family"] for r in runs):
        mine = [r for r in runs if r["family"] == family]
        first = mine[0]
        print(f"{family}, D = {first['dim']}, {first['rows']:,} rows, {PARTICLES} particles, "
              f"{moves} moves (width after the first {BURN_IN}); exact moves' width "
              f"{first['reference_width']:.4f} ± {first['reference_stderr']:.4f}")
        print(table(["variant", "lr", "steps", "batch", "width", "± stderr", "/ exact", "CPU s"],
                    [[r["variant"], f"{r['settings']['lr']:.5f}", r["settings"]["steps"],
                      r["settings"]["batch_size"], f"{r['width']:.4f}", f"{r['stderr']:.4f}",
                      f"{r['ratio']:.4f}", f"{r['cpu_seconds']:.0f}"] for r in mine]))
    path = write_json("move_width", {"environment": environment(1), "moves": moves,
                                     "particles": PARTICLES, "runs": runs}, args.output)
    print(f"wrote {path}")

if __name__ == "__main__":
    main()
