"""Error rates of a decision rule (docs/guide/decisions.md): how often "log BF(b : a) > log 20"
ever fires when model a is true, and how soon it fires when b is, on the exact evidence and on
SG-AIS's with the service's rule (``service.decisions.against_threshold``: the value lowered by
k = 2 of its standard errors).

Linear regression with σ = 1 known and N(0, 1) priors: a reads input 1 and a bias, b reads
inputs 1 and 2 and a bias, so a is b with its second weight fixed at 0 and a's prior is b's
restricted. Each stream draws its weights from the true model's prior, x ~ N(0, I₂), and up to
``--rows`` rows (2e4) in 100-row chunks; the rule is looked at after every chunk and a stream
stops at its first firing. Under a, Ville's inequality bounds the chance that the exact Bayes
factor ever reaches 20 by 1/20, however long the stream; the target is that the fraction fired
is ≤ 1/20 within its 95% (Wilson) interval, for the exact evidence and for SG-AIS. Under b, the
median rows until the rule fires (streams where it never fires count as not fired, and the
median is over all streams, infinite when most never fire), and on how many streams SG-AIS's
rule fired at the same row as the exact one's (or neither fired). Runs go to ``--processes`` worker
processes of one torch thread each.

A second part runs a real deployment (tests/faults/webhook_trials.py): rules with webhooks
fire while the worker is SIGKILLed mid-chunk and the receiver is down for 10 s; every event must
reach the receiver, signed, and the websocket must show the same events as GET …/events.

    python benchmarks/decisions.py              # 200 streams under a, 200 under b, 2e4 rows
    python benchmarks/decisions.py --quick      # 20 + 20 streams, 5,000 rows
    python benchmarks/decisions.py --part deployment   # the deployment part only
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _common import environment, result_path, set_threads, table, verdict, write_json

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.models import LinearRegression
from modelcompare.service.decisions import against_threshold
from modelcompare.service.rules import DEFAULT_STDERRS, BayesFactorTest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "faults")]
from webhook_trials import run as run_deployment  # noqa: E402

LOG_THRESHOLD = math.log(20.0)
CHUNK = 100
RULE = BayesFactorTest(model="b", against="a", above=LOG_THRESHOLD)


def stream(truth: str, seed: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ N(0, I₂); y from the true model with its weights drawn from its prior."""
    g = torch.Generator().manual_seed(derive_seed("decisions", truth, seed))
    x = torch.randn(rows, 2, generator=g, dtype=torch.float64)
    weight_1, weight_2, bias = torch.randn(3, generator=g, dtype=torch.float64)
    if truth == "a":
        weight_2 = torch.zeros((), dtype=torch.float64)
    return x, x[:, 0] * weight_1 + x[:, 1] * weight_2 + bias + torch.randn(
        rows, generator=g, dtype=torch.float64)


def fires(log_bf: float, stderr: float) -> bool:
    return against_threshold(RULE, log_bf, stderr, DEFAULT_STDERRS, {})[0]


def run_stream(truth: str, seed: int, rows: int) -> dict[str, Any]:
    """The first row count at which the rule fired on the exact and on SG-AIS's evidence (None:
    never within ``rows``), and SG-AIS's CPU seconds."""
    set_threads(1)
    x, y = stream(truth, seed, rows)
    models = {"a": LinearRegression(1, noise_std=1.0, prior_std=1.0),
              "b": LinearRegression(2, noise_std=1.0, prior_std=1.0)}
    columns = {"a": [0], "b": [0, 1]}
    exact = {name: OnlineEvidence(model, method="exact") for name, model in models.items()}
    sgais = {name: OnlineEvidence(model, seed=seed) for name, model in models.items()}
    fired: dict[str, int | None] = {"exact": None, "sgais": None}
    cpu = 0.0
    for start in range(0, rows, CHUNK):
        rows_seen = min(start + CHUNK, rows)
        chunk = {name: (x[start:rows_seen, columns[name]], y[start:rows_seen]) for name in models}
        if fired["exact"] is None:
            for name, tracker in exact.items():
                tracker.update(*chunk[name])
            if fires(exact["b"].log_evidence - exact["a"].log_evidence, 0.0):
                fired["exact"] = rows_seen
        if fired["sgais"] is None:
            began = time.process_time()
            for name, tracker in sgais.items():
                tracker.update(*chunk[name])
            cpu += time.process_time() - began
            log_bf = sgais["b"].log_evidence - sgais["a"].log_evidence
            stderr = math.hypot(sgais["a"].log_evidence_stderr, sgais["b"].log_evidence_stderr)
            if fires(log_bf, stderr):
                fired["sgais"] = rows_seen
        if None not in fired.values():
            break
    return {"truth": truth, "seed": seed, "fired_exact": fired["exact"],
            "fired_sgais": fired["sgais"], "sgais_cpu_seconds": cpu}


def wilson(hits: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial fraction."""
    if total == 0:
        return math.nan, math.nan
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def median_rows(fired: list[int | None]) -> float:
    """The median of the rows until firing over every stream, a never-fired stream counted as
    infinitely many."""
    return statistics.median(math.inf if f is None else f for f in fired)


def error_rates(streams: int, rows: int, processes: int) -> dict[str, Any]:
    jobs = [(truth, seed, rows) for truth in ("a", "b") for seed in range(streams)]
    with ProcessPoolExecutor(processes) as pool:
        runs = list(pool.map(run_stream, *zip(*jobs, strict=True)))

    summaries, checks = [], {}
    for truth in ("a", "b"):
        mine = [r for r in runs if r["truth"] == truth]
        for estimator in ("exact", "sgais"):
            fired = [r[f"fired_{estimator}"] for r in mine]
            hits = sum(f is not None for f in fired)
            low, high = wilson(hits, len(fired))
            same = sum(r[f"fired_{estimator}"] == r["fired_exact"] for r in mine)
            summaries.append({"truth": truth, "estimator": estimator, "streams": len(fired),
                              "fired": hits, "fraction": hits / len(fired),
                              "interval": [low, high], "median_rows_to_fire": median_rows(fired),
                              "same_as_exact": same})
            if truth == "a":
                checks[f"{estimator}_fires_at_most_1_in_20"] = low <= 1 / 20
    print(f"rule: log BF(b : a) − {DEFAULT_STDERRS:g}·stderr > log 20, looked at every {CHUNK} "
          f"rows, up to {rows:,} rows; {streams} streams per true model")
    print(table(
        ["true model", "evidence", "fired", "fraction", "95% interval", "median rows to fire",
         "fired at the exact's row"],
        [[s["truth"], s["estimator"], f"{s['fired']}/{s['streams']}", f"{s['fraction']:.3f}",
          f"{s['interval'][0]:.3f}–{s['interval'][1]:.3f}", f"{s['median_rows_to_fire']:,.0f}",
          f"{s['same_as_exact']}/{s['streams']}"] for s in summaries],
    ))
    for name, ok in checks.items():
        print(f"{name.replace('_', ' ')} (Ville: ≤ 1/20 within the interval): {verdict(ok)}")
    cpu = [r["sgais_cpu_seconds"] for r in runs]
    print(f"SG-AIS CPU s per stream (two models): median {statistics.median(cpu):.2f}, "
          f"total {sum(cpu):.0f}")
    return {"environment": environment(1), "rows": rows, "streams": streams, "chunk": CHUNK,
            "stderrs": DEFAULT_STDERRS, "log_threshold": LOG_THRESHOLD, "summaries": summaries,
            "checks": checks, "runs": runs}


def deployment(quick: bool) -> dict[str, Any]:
    comparisons, chunks = (2, 60) if quick else (4, 160)
    with tempfile.TemporaryDirectory() as workdir:
        found = run_deployment(Path(workdir), comparisons, chunks, pace=0.2, kill_every=4.0,
                               outage=10.0)
    checks = {
        "every_event_delivered": not found["missing"] and not found["unknown"],
        "signatures_verify": found["bad_signatures"] == 0 and found["bad_bodies"] == 0,
        "websocket_matches_events": found["websocket_matches_events"],
        "none_dead": found["dead"] == 0,
    }
    print(f"deployment: {comparisons} comparisons × {chunks} chunks, {found['worker_kills']} "
          f"worker SIGKILLs, receiver down {found['receiver_down_seconds']:g} s: "
          f"{found['events']} events, {found['deliveries_received']} deliveries received, "
          f"{found['distinct_ids_received']} distinct ids, "
          f"{found['received_twice_or_more']} ids received more than once, "
          f"{len(found['missing'])} missing, {found['bad_signatures']} bad signatures; "
          f"chunks applied in {found['applied_seconds']:.1f} s, deliveries done at "
          f"{found['delivered_seconds']:.1f} s; from decision to delivery median "
          f"{found['latency_seconds']['median']:.2f} s, max {found['latency_seconds']['max']:.2f} s"
          f" (the outage's); first delivery {found['first_delivery_after_outage_seconds']:.2f} s "
          "after the receiver was back")
    for name, ok in checks.items():
        print(f"{name.replace('_', ' ')}: {verdict(ok)}")
    return {"environment": environment(1), **found, "checks": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, help="streams per true model (200; quick: 20)")
    parser.add_argument("--rows", type=float, help="rows per stream at most (2e4; quick: 5e3)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--part", choices=("all", "rates", "deployment"), default="all",
                        help="one part only: the other part of the result file is kept")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    streams = args.streams or (20 if args.quick else 200)
    rows = int(args.rows or (5_000 if args.quick else 20_000))
    target = result_path(args.output, "decisions.json")  # fails early on a bad --output
    kept = json.loads(target.read_text()) if target.exists() else {}
    if "summaries" in kept:  # a file from before the deployment part: all of it is the rates
        kept = {"error_rates": kept}
    payload = {
        "error_rates": (error_rates(streams, rows, args.processes) if args.part != "deployment"
                        else kept.get("error_rates")),
        "deployment": (deployment(args.quick) if args.part != "rates"
                       else kept.get("deployment")),
    }
    path = write_json("decisions", payload, target)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
