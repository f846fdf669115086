"""How wide SG-AIS's SGHMC move leaves a cloud that starts on the posterior.

A move that leaves the posterior invariant keeps a cloud drawn from it on it; one that samples a
slightly hotter or colder law widens or narrows it a little at every move, and at many
parameters a little per direction is a lot in log Z. An annealed piece's increment is
∫₀¹ E_λ[log p(piece | θ)] dλ (thermodynamic integration, the limit of many steps); for r rows
after n, a cloud whose variance is (1 + ε) times π_λ's in each of D whitened directions reads
each expectation ε D r / (2 (n + λ r)) low, so the piece −ε D log(1 + r/n) / 2: 1% at D = 161
is −0.08 nats per 500-row chunk at n = 5,000 (docs/design/moves.md, "The moves' width").

Linear regression with D − 1 inputs and a bias (benchmarks/dimension.py's data set 0): the
posterior after ``--rows`` rows is N(μ, H⁻¹) exactly. M particles are drawn from it and moved
``--moves`` times by the SGHMC move of SG-AIS past its exact phase, at λ = 0 of a 500-row
piece, with its settings scaled to D (``online.dimension``) and its pooled mass rule; after each
move the cloud's width is the mean over particles of (θ − μ)ᵀ H (θ − μ) / D, 1 on the
posterior. The default move takes its mass from the clouds of the steps before (``smc.mass``)
and reads the past in minibatches scaled to D; the variants change one or two things: the
exact posterior covariance as the mass, the step's own cloud in the mass (the rule before), the
cloud resampled before each move (multinomially, on random weights: the duplicates a selection
leaves), the past's minibatch at its unscaled 100 rows, with and without the noise friction, and
a quarter of the step with twice the steps.

    python benchmarks/move_width.py            # D = 161, 5,000 rows, 110 moves
    python benchmarks/move_width.py --quick    # D = 81, 30 moves

Prints the mean width after the first 10 moves and its standard error (batch means), and
writes results/move_width.json.
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
from dimension import chunks_of, model_of
from torch import Tensor

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.online.dimension import scaled_to_dimension
from modelcompare.estimators.online.kernels import sghmc
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import PastData, Piece, anchor_at, with_piece
from modelcompare.estimators.smc.covariance import covariance_factor
from modelcompare.estimators.smc.mass import NO_POOL, MassPool, MassRule, mass_rule, pooled_mass

PARTICLES, PIECE, BURN_IN, BATCHES = 64, 500, 10, 5
# the past's minibatch at D <= 44 (``online.dimension`` scales it by D / 44)
UNSCALED_BATCH = SGAISSettings().batch_size


class Variant(NamedTuple):
    name: str
    mass: str = "pool"  # "pool": the default rule; "own cloud": the step's cloud in the pool
    # it moves with (the rule before); "exact": the posterior covariance
    batch_scaled: bool = True  # the past's minibatch as scaled to D, else 100 rows
    noise_friction: bool = True
    resampled: bool = False  # the cloud resampled before each move (duplicates)
    weak: bool = False  # a quarter of the step with twice the steps


VARIANTS = (
    Variant("default"),
    Variant("exact mass", mass="exact"),
    Variant("own cloud in the mass", mass="own cloud"),
    Variant("resampled", resampled=True),
    Variant("resampled, own cloud in the mass", mass="own cloud", resampled=True),
    Variant("minibatch 100", batch_scaled=False),
    Variant("minibatch 100, noise friction off", batch_scaled=False, noise_friction=False),
    Variant("lr/4, 2x steps", weak=True),
    Variant("lr/4, 2x steps, own cloud in the mass", mass="own cloud", weak=True),
)


def settings_of(variant: Variant, dim: int) -> SGAISSettings:
    scaled = scaled_to_dimension(SGAISSettings(), dim)
    update: dict[str, Any] = {"noise_friction": variant.noise_friction}
    if not variant.batch_scaled:
        update["batch_size"] = UNSCALED_BATCH
    if variant.weak:
        update |= {"lr": scaled.lr / 4, "steps": 2 * scaled.steps}
    return scaled.model_copy(update=update)


def own_cloud_mass(clouds: int) -> MassRule:
    """The pooled rule with the step's own cloud averaged in before the moves take it."""
    rule = pooled_mass(clouds)

    def with_own(theta: Tensor, log_weights: Tensor, pool: MassPool) -> tuple[Tensor, MassPool]:
        _, pooled = rule(theta, log_weights, pool)
        samples = round(1 / float(pooled.inverse_samples))
        return covariance_factor(pooled.covariance, samples), pooled

    return with_own


def widths(variant: Variant, dim: int, rows: int, moves: int) -> dict[str, Any]:
    """The cloud's width after each move of ``variant`` (see the module docstring)."""
    set_threads(1)
    started = time.process_time()
    settings, model = settings_of(variant, dim), model_of("linear", dim)
    chunks = chunks_of("linear", dim, 0, rows + PIECE)
    x, y = torch.cat([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
    past, piece_rows = Rows(x[:rows], y[:rows]), Rows(x[rows:], y[rows:])
    design = torch.cat([past.x, torch.ones(rows, 1, dtype=x.dtype)], 1)
    precision = torch.eye(dim, dtype=torch.float64) + design.T @ design  # σ = τ = 1
    mean = torch.linalg.solve(precision, design.T @ past.y)
    factor = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(precision)))
    history = RowsHistory(past)
    anchor = with_piece(model, anchor_at(model, mean, history), piece_rows)
    piece = Piece(model, piece_rows, PastData(history, None, settings.batch_size, anchor))
    move = sghmc(piece, settings.sghmc, settings.gradient_precision)
    generator = torch.Generator().manual_seed(1)
    theta = mean + torch.randn(PARTICLES, dim, generator=generator, dtype=x.dtype) @ factor.T
    log_weights = torch.full((PARTICLES,), -math.log(PARTICLES), dtype=x.dtype)
    rule = (own_cloud_mass if variant.mass == "own cloud" else mass_rule)(settings.mass_clouds)
    pool, found = NO_POOL, []
    for _ in range(moves):
        if variant.resampled:
            noisy = torch.softmax(torch.randn(PARTICLES, generator=generator, dtype=x.dtype), 0)
            theta = theta[torch.multinomial(noisy, PARTICLES, True, generator=generator)]
        scale, pool = rule(theta, log_weights, pool)
        theta = move(theta, 0.0, factor if variant.mass == "exact" else scale, generator,
                     lambda: None).particles
        offset = theta - mean
        found.append(float(((offset @ precision) * offset).sum(-1).mean()) / dim)
    kept = found[BURN_IN:]
    size = len(kept) // BATCHES
    means = [statistics.fmean(kept[i * size:(i + 1) * size]) for i in range(BATCHES)]
    return {"variant": variant.name, "dim": dim, "rows": rows, "moves": moves,
            "settings": {k: getattr(settings, k) for k in ("lr", "steps", "batch_size",
                                                             "noise_friction", "mass_clouds")},
            "width": statistics.fmean(kept),
            "stderr": statistics.stdev(means) / math.sqrt(BATCHES),
            "widths": found, "cpu_seconds": time.process_time() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--rows", type=int, default=5_000)
    parser.add_argument("--moves", type=int, default=None)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    dim = args.dim or (81 if args.quick else 161)
    moves = args.moves or (30 if args.quick else 110)
    with ProcessPoolExecutor(args.processes) as pool:
        runs = list(pool.map(widths, VARIANTS, [dim] * len(VARIANTS),
                             [args.rows] * len(VARIANTS), [moves] * len(VARIANTS)))
    print(f"D = {dim}, {args.rows:,} rows, {PARTICLES} particles, {moves} moves "
          f"(width after the first {BURN_IN}; 1 on the posterior)")
    print(table(["variant", "lr", "steps", "batch", "width", "± stderr", "CPU s"],
                [[r["variant"], f"{r['settings']['lr']:.5f}", r["settings"]["steps"],
                  r["settings"]["batch_size"], f"{r['width']:.4f}", f"{r['stderr']:.4f}",
                  f"{r['cpu_seconds']:.0f}"] for r in runs]))
    path = write_json("move_width", {"environment": environment(1), "dim": dim,
                                     "rows": args.rows, "particles": PARTICLES, "runs": runs},
                      args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
