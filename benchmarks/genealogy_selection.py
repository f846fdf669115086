"""Where a piece's genealogy should start after a selection that no step records.

The online loop ends a widened piece (``careful_particles`` × M particles) with a selection
back to M, and the next piece's Eves are the particles that selection drew from
(``smc.genealogy.selected``). This toy isolates that: piece 1 weights 4M prior draws of a
Beta–Bernoulli model by its first rows (importance sampling, whose variance is the delta method's),
M particles are selected from them, and piece 2 anneals the next 40 rows from those M (adaptive
temperatures, multinomial resampling below ESS/M = 0.5, no moves). Over repeats it compares the
replicate variance of log Ẑ₁ + log Ẑ₂ with the mean of

- ``carried``: piece 1's variance + piece 2's Eve variance from the selected Eves;
- ``at_start``: piece 1's variance + piece 2's Eve variance from Eves at the M copies;
- ``one_genealogy``: one Eve variance over both pieces, Eves at the 4M draws (Chan & Lai's
  estimator of the whole run).

    python benchmarks/genealogy_selection.py            # M = 400, 1,000 repeats (about 3 min)
    python benchmarks/genealogy_selection.py --quick    # M = 100, 100 repeats

Writes results/genealogy_selection.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
from typing import Any

import torch
from _common import environment, set_threads, table, write_json

from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation, selected
from modelcompare.estimators.smc.resampling import RESAMPLERS, resample_below
from modelcompare.estimators.smc.temperature import adaptive
from modelcompare.estimators.smc.tempered import (
    Moved,
    TemperedSMC,
    anneal,
    checked_log_likelihood,
    start,
)
from modelcompare.models import BetaBernoulli

F64 = torch.float64
SECOND_PIECE_ROWS = 40


def unmoved(theta: torch.Tensor, *_: Any) -> Moved:
    return Moved(theta, ())


def second_piece(model: BetaBernoulli, rows: torch.Tensor) -> TemperedSMC:
    def log_likelihood(theta: torch.Tensor) -> torch.Tensor:
        return checked_log_likelihood(model.log_likelihood(theta, None, rows).sum(-1))

    return TemperedSMC(log_likelihood, adaptive(0.5),
                       resample_below(0.5, RESAMPLERS["multinomial"]), unmoved)


def case(selection: str, first_rows: int, m: int, repeats: int, seed: int) -> dict[str, Any]:
    """One selection scheme and first-piece length: the replicate variance and each estimate."""
    g = torch.Generator().manual_seed(seed)
    model = BetaBernoulli(2.0, 2.0)
    y = (torch.rand(first_rows + SECOND_PIECE_ROWS, generator=g, dtype=F64) < 0.8).to(F64)
    smc = second_piece(model, y[first_rows:])
    uniform = torch.full((m,), -math.log(m), dtype=F64)
    whole_run = torch.full((4 * m,), 1.0 / (4 * m), dtype=F64)
    totals: list[float] = []
    estimates: dict[str, list[float]] = {"carried": [], "at_start": [], "one_genealogy": []}
    for _ in range(repeats):
        theta = model.sample_prior(4 * m, g)
        log_likelihood = model.log_likelihood(theta, None, y[:first_rows]).sum(-1)
        wide = torch.log_softmax(log_likelihood, 0)
        first = float(torch.logsumexp(log_likelihood, 0)) - math.log(4 * m)
        first_variance = float(((torch.exp(wide) - 1.0 / (4 * m)) ** 2).sum())
        ancestors = RESAMPLERS[selection](torch.exp(wide), g, m)
        _, steps = anneal(smc, start(smc, theta[ancestors], uniform), g, 200)
        totals.append(first + sum(s.log_evidence_increment for s in steps))
        estimates["carried"].append(first_variance
                                    + eve_variance(selected(wide, ancestors), steps))
        estimates["at_start"].append(first_variance
                                     + eve_variance(first_generation(uniform), steps))
        estimates["one_genealogy"].append(eve_variance(Eves(ancestors, whole_run, 0.0), steps))
    replicate = statistics.variance(totals)
    return {
        "selection": selection, "first_rows": first_rows, "particles": m, "repeats": repeats,
        "replicate_variance": replicate,
        # a sample variance over n repeats has a relative standard error of about √(2 / n)
        "replicate_relative_stderr": math.sqrt(2.0 / (repeats - 1)),
        **{name: statistics.fmean(values) for name, values in estimates.items()},
        **{f"{name}_ratio": statistics.fmean(values) / replicate
           for name, values in estimates.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--particles", type=int, default=400, help="M")
    parser.add_argument("--repeats", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--output", default="genealogy_selection.json")
    parser.add_argument("--quick", action="store_true", help="M = 100, 100 repeats")
    args = parser.parse_args()
    if args.quick:
        args.particles, args.repeats = 100, 100
    set_threads(1)
    cases = [case(selection, first_rows, args.particles, args.repeats, args.seed)
             for selection in ("multinomial", "systematic") for first_rows in (5, 20)]
    print(table(
        ["selection", "piece 1 rows", "replicate", "carried", "at start", "one genealogy",
         "carried ÷ rep.", "at start ÷ rep."],
        [[c["selection"], c["first_rows"],
          *(f"{c[k]:.5f}" for k in ("replicate_variance", "carried", "at_start",
                                    "one_genealogy")),
          f"{c['carried_ratio']:.2f}", f"{c['at_start_ratio']:.2f}"]
         for c in cases],
    ))
    print(f"(M = {args.particles}, {args.repeats} repeats; the replicate variance's relative "
          f"stderr ≈ {cases[0]['replicate_relative_stderr']:.0%})")
    path = write_json("genealogy_selection", {
        "benchmark": "genealogy_selection", "settings": vars(args),
        "environment": environment(1), "cases": cases,
    }, args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
