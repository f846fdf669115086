"""How hot plain SGHMC moves would run: minibatch gradient noise against the injected noise.

An SGHMC step (estimators/moves/sghmc.py) adds η M⁻¹ ĝ with ĝ the minibatch gradient of covariance
V, and injects N(0, 2αη M⁻¹). Plain SGHMC (``noise_friction=False``) takes the gradient noise as
zero (Chen, Fox & Guestrin 2014, eq. 15 with β̂ = 0). In the whitened coordinates of M⁻¹ = L Lᵀ the
gradient noise adds η² Lᵀ V L, i.e. a fraction η λ / (2α) of the injected noise along each
eigenvector (eigenvalue λ of Lᵀ V L): where that fraction is not small, the moves sample a hotter
law than the tempered posterior. This measurement is why the default raises the friction by B̂ = η
Lᵀ V̂ L / 2 (``noise_friction``).

This script streams paper.py's logistic data (defaults, seed 0) and, at checkpoints, estimates V
at the first ``--probe`` particles from ``--draws`` minibatch gradients (control variates at the
state's anchor, as the moves use them) for minibatch sizes 100 (the default) and 1000.

    python benchmarks/sgais_noise.py            # 1e4 rows
    python benchmarks/sgais_noise.py --quick    # 2e3 rows, fewer draws

Writes results/sgais_noise.json.
"""

from __future__ import annotations

import argparse

import torch
from _common import environment, set_threads, table, write_json
from paper import build, simulate

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.history import RowsHistory
from modelcompare.estimators.moves.sghmc import sghmc_step
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import Anchor, PastData, grad_log_target
from modelcompare.estimators.smc.covariance import particle_scale

CHUNK, BATCH_SIZES = 500, (100, 1_000)


def noise_fractions(
    tracker: OnlineEvidence, history: RowsHistory, batch_size: int, probe: int, draws: int
) -> torch.Tensor:
    """η λ / (2α) for every eigenvalue λ of Lᵀ V L at each probed particle: (probe, D)."""
    state, config = tracker.state, SGAISSettings()
    past = PastData(history, None, batch_size, Anchor(state.anchor.point, state.anchor.grad))
    generator = torch.Generator().manual_seed(batch_size)
    no_chunk = history.rows.slice(0, 1)  # at temperature 0 the chunk does not enter
    theta, model = state.particles[:probe], tracker.model
    gradients = torch.stack(
        [grad_log_target(model, theta, no_chunk, 0.0, past, generator) for _ in range(draws)]
    )
    # The step and metric the moves use at this state (estimators/online/kernels.py).
    particle_factor = particle_scale(state.particles, state.log_weights)
    step, factor = sghmc_step(config.sghmc, particle_factor, len(history))
    covariances = [torch.cov(gradients[:, i].T) for i in range(probe)]
    eigenvalues = torch.stack([torch.linalg.eigvalsh(factor.T @ v @ factor) for v in covariances])
    return step * eigenvalues / (2.0 * config.friction)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--probe", type=int, default=16, help="particles probed")
    parser.add_argument("--draws", type=int, default=200, help="minibatch gradients per particle")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2e3 rows, 50 draws")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.draws = 2_000, 50
    set_threads(args.threads)
    rows = simulate("logistic", 10**6, 0).slice(0, args.rows)
    tracker = OnlineEvidence(build("logistic"), seed=0)
    checkpoints = {n for n in (1_000, 2_000, 5_000, 10_000) if n <= args.rows}
    results = []
    for start in range(0, args.rows, CHUNK):
        part = rows.slice(start, start + CHUNK)
        tracker.update(part.x, part.y)
        if tracker.n_observations not in checkpoints:
            continue
        history = RowsHistory(rows.slice(0, tracker.n_observations))
        for batch_size in BATCH_SIZES:
            fractions = noise_fractions(tracker, history, batch_size, args.probe, args.draws)
            results.append(
                {
                    "n": tracker.n_observations,
                    "batch_size": batch_size,
                    "mean_fraction": float(fractions.mean()),
                    "largest_fraction": float(fractions.max()),
                    "median_particle_largest": float(fractions.max(1).values.median()),
                }
            )
            print(results[-1], flush=True)
    print(
        "\ngradient noise / injected noise in the whitened metric (η λ / 2α)\n"
        + table(
            ["n", "batch", "mean over directions", "largest", "median particle's largest"],
            [[r["n"], r["batch_size"], *list(r.values())[2:]] for r in results],
        )
    )
    payload = {
        "benchmark": "sgais_noise",
        "settings": vars(args),
        "environment": environment(args.threads),
        "results": results,
    }
    print(f"\nwrote {write_json('sgais_noise', payload)}")


if __name__ == "__main__":
    main()
