"""Where SG-AIS's low log Z on softmax regression and the mixture comes from, per setting.

paper.py found SG-AIS's log Ẑ below the Laplace importance-sampling reference on logistic
regression (10 inputs, 4 classes) and the 2-D, 5-component mixture by more than its standard
error, the gap growing with N. This script streams the first ``--rows`` rows of paper.py's data
for ``--model`` in 500-row chunks with several SG-AIS settings and seeds, and reports
log Ẑ − log Z_ref at checkpoints, log Z_ref from ``run_laplace_is`` on the same rows (its stderr
≈ 0.02–0.05 nats), or for ``--model linear`` the exact log Z. Every seed streams the same data,
so the spread of log Ẑ over seeds is the estimator's own, to hold against its stderr.

    python benchmarks/sgais_bias.py                      # logistic, 1e4 rows, 3 seeds
    python benchmarks/sgais_bias.py --model mixture
    python benchmarks/sgais_bias.py --settings default "defaults before"
    python benchmarks/sgais_bias.py --quick              # 2e3 rows, 2 seeds

Writes results/sgais_bias_<model>.json, or ``--output NAME`` (results/runs/NAME.json), as the
1e6 runs over more seeds below do.

    python benchmarks/sgais_bias.py --model mixture --rows 1000000 --seeds 5 \
        --settings default --output mixture_1e6   # the 1e6 figure
    python benchmarks/sgais_bias.py --model mixture --rows 1000000 --seeds 5 --first-seed 5 \
        --settings default --output mixture_1e6_more   # five more seeds
    python benchmarks/sgais_bias.py --model linear --rows 1000000 --seeds 20 \
        --settings default --output linear_1e6   # exact reference
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from _common import environment, set_threads, table, write_json
from paper import build, simulate

from modelcompare.estimators import EstimatorError, OnlineEvidence
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, run_laplace_is

CHUNK = 500
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    # The defaults until 2026-11: plain SGHMC, and 4 exact HMC moves of 20 leapfrog steps.
    "defaults before": {"noise_friction": False, "hmc_moves": 4, "leapfrog_steps": 20},
    "noise friction off": {"noise_friction": False},
    "HMC 4 x 20 steps": {"hmc_moves": 4, "leapfrog_steps": 20},
    "HMC 3 x 10 steps": {"hmc_moves": 3},
    "HMC 4 x 10 steps": {"hmc_moves": 4},
    "HMC 8 x 10 steps": {"hmc_moves": 8, "leapfrog_steps": 10},  # the exact phase's defaults
    "particles 256": {"particles": 256},
    "steps 50": {"steps": 50},
    "ess_target 0.95": {"ess_target": 0.95},
    "lr 0.02": {"lr": 0.02},
    "barker correction": {"mh_correction": "barker"},
    "batch_size 1000": {"batch_size": 1_000},
    "friction 0.5": {"friction": 0.5},
    "exact HMC throughout": {"full_batch_rows": 10_000},  # no SGHMC phase up to 1e4 rows
}


def checkpoints(rows: int) -> list[int]:
    return sorted({n for n in (CHUNK, 1_000, 2_000, 5_000, 10_000, rows) if n <= rows})


def references(model: str, rows: Any, points: list[int]) -> dict[int, dict[str, float]]:
    """Laplace-IS at each checkpoint where it finds a mode (the mixture has none at n = 500);
    linear regression's exact log Z."""
    if model == "linear":
        return exact_references(rows, points)
    out = {}
    for n in points:
        try:
            found = run_laplace_is(
                build(model),
                rows.slice(0, n),
                LaplaceISSettings(),
                torch.Generator().manual_seed(n),
            )
        except EstimatorError as error:
            print(f"no reference at n = {n}: {error}")
            continue
        out[n] = {
            "log_z": found.evidence.log_evidence,
            "stderr": found.evidence.log_evidence_stderr,
            "pareto_k": found.pareto_k,
        }
    return out


def exact_references(rows: Any, points: list[int]) -> dict[int, dict[str, float]]:
    exact, out = OnlineEvidence(build("linear"), method="exact"), {}
    for start in range(0, rows.count, CHUNK):
        part = rows.slice(start, min(start + CHUNK, rows.count))
        exact.update(part.x, part.y)
        if exact.n_observations in points:
            out[exact.n_observations] = {"log_z": exact.log_evidence, "stderr": 0.0}
    return out


def stream(
    model: str, rows: Any, settings: dict[str, Any], seed: int, points: list[int]
) -> dict[str, Any]:
    tracker = OnlineEvidence(build(model), seed=seed, **settings)
    begin = time.process_time()
    out: dict[int, tuple[float, float]] = {}
    for start in range(0, rows.count, CHUNK):
        part = rows.slice(start, min(start + CHUNK, rows.count))
        tracker.update(part.x, part.y)
        if tracker.n_observations in points:
            out[tracker.n_observations] = (tracker.log_evidence, tracker.log_evidence_stderr)
    return {"seconds": time.process_time() - begin, "log_z": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["logistic", "mixture", "linear"], default="logistic")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run: first..first+seeds-1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2e3 rows, 2 seeds")
    parser.add_argument(
        "--output", help="results/runs/<name>.json (default: results/sgais_bias_<model>.json)"
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.seeds = 2_000, 2
    set_threads(args.threads)
    rows = simulate(args.model, 10**6, 0).slice(0, args.rows)  # paper.py's data, first rows
    points = checkpoints(args.rows)
    reference = references(args.model, rows, points)
    points = [n for n in points if n in reference]
    runs = []
    for label in args.settings:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            run = stream(args.model, rows, SETTINGS[label], seed, points)
            gaps = {n: run["log_z"][n][0] - reference[n]["log_z"] for n in points}
            runs.append({"setting": label, "seed": seed, **run, "gap": gaps})
            print(label, seed, {n: round(g, 2) for n, g in gaps.items()}, flush=True)
    summary = []
    for label in args.settings:
        mine = [r for r in runs if r["setting"] == label]
        summary.append(
            {
                "setting": label,
                "mean_gap": {n: statistics.fmean(r["gap"][n] for r in mine) for n in points},
                "median_stderr_last": statistics.median(r["log_z"][points[-1]][1] for r in mine),
                "mean_seconds": statistics.fmean(r["seconds"] for r in mine),
            }
        )
    print(
        "\nlog Ẑ_SG-AIS − log Z_Laplace-IS (nats), mean over seeds\n"
        + table(
            ["setting", *(f"n={n:,}" for n in points), "stderr", "CPU s"],
            [
                [s["setting"], *s["mean_gap"].values(), s["median_stderr_last"], s["mean_seconds"]]
                for s in summary
            ],
        )
    )
    payload = {
        "benchmark": "sgais_bias",
        "settings": {**vars(args), "chunk": CHUNK, "model_config": build(args.model).config()},
        "environment": environment(args.threads),
        "reference": reference,
        "summary": summary,
        "runs": runs,
    }
    named = f"{args.output}.json" if args.output else None
    print(f"\nwrote {write_json('sgais_bias_' + args.model, payload, named)}")


if __name__ == "__main__":
    main()
