"""The bias SG-AIS's moves add over a stretch of a stream, measured with little noise.

A whole run's error mixes the large variance of its first pieces (prior to posterior) with
whatever small bias each later chunk adds: at 64 particles on softmax regression the errors'
SD is about 1 nat, so a bias of 0.3 nats over the run needs some hundred runs to see. Here
every run starts from one shared particle state at row ``--start`` (n0), built once with exact,
Metropolis-corrected moves on the full past (``full_batch_rows`` = n0), and streams rows n0..N
in 500-row chunks with its own engine seed and the settings under test (``--variant``). What
each run estimates is log p(rows n0..N | rows < n0) = log Z(N) − log Z(n0), exact for linear
regression and the difference of two Laplace-IS references otherwise (each ± 0.02–0.1 nats).
Runs differ only in the moves' randomness after n0, so a variant's mean error is its bias
over the stretch, to ± SD/√runs, and its errors' SD against the stderr the engine reports for
the stretch (the increase of its variance) tells how well that stderr covers them.

Each run also keeps its chunks' increments and reported variances, and each variant gets a
variance budget: Σ_k Var(X_k) over the chunks' increments X_k across runs (what the per-chunk
stderr has to cover) against Σ_k σ̂_k² (what it reports), and Var(Σ_k X_k) − Σ_k Var(X_k), the
covariance between chunks that a per-piece stderr leaves out. ``--per-chunk`` prints each chunk
(with its mean error, for linear regression, against the exact log p(chunk | earlier rows)).

    python benchmarks/segment_bias.py --family logistic --particles 256 --runs 24 \
        --variant default='{}' --variant batch400='{"batch_size": 400, "piece_batch_size": 400}'
    python benchmarks/segment_bias.py --family linear --stream ordered --runs 12 --per-chunk
    python benchmarks/segment_bias.py --quick      # linear, N = 3000, n0 = 1000, 3 runs

Writes results/segment_bias.json (or ``--output``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from _common import environment, result_path, set_threads, table, write_json
from calibration import CHUNK, FAMILIES, STREAMS, build, data_set, reference

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.online.settings import ExactPhaseSettings

MAX_START = ExactPhaseSettings.model_fields["full_batch_rows"].metadata[-1].le
START_SEED = 1_000_000  # the shared start's engine seed; the runs take seeds 0, 1, ...


def start_state(family: str, data: Rows, start: int, particles: int) -> bytes:
    """The tracker after rows < ``start``, every move exact (``full_batch_rows`` = start)."""
    tracker = OnlineEvidence(
        build(family), seed=START_SEED, particles=particles, full_batch_rows=start
    )
    stream(tracker, data, 0, start)
    return tracker.save()


def stream(tracker: OnlineEvidence, data: Rows, first: int, last: int) -> None:
    for begin in range(first, last, CHUNK):
        part = data.slice(begin, min(begin + CHUNK, last))
        tracker.update(part.x, part.y)


def exact_chunk_increments(data: Rows, start: int) -> list[float]:
    """log p(chunk | earlier rows) of each chunk from row ``start`` on (linear regression)."""
    exact = OnlineEvidence(build("linear"), method="exact")
    increments = []
    for begin in range(0, data.count, CHUNK):
        before = exact.log_evidence
        part = data.slice(begin, min(begin + CHUNK, data.count))
        exact.update(part.x, part.y)
        if begin >= start:
            increments.append(exact.log_evidence - before)
    return increments


def segment_run(
    family: str,
    data: Rows,
    start: int,
    state: bytes,
    settings: dict[str, Any],
    seed: int,
    truth: float,
) -> dict[str, Any]:
    """One run from the shared ``state`` with ``settings`` and engine ``seed``: its estimate of
    log p(rows start..N | rows < start), error against ``truth`` and stderr over the stretch,
    and each chunk's increment of the reported log Z, of its variance and annealing steps."""
    tracker = OnlineEvidence(build(family), seed=START_SEED, **settings)
    tracker.load(state)
    tracker.seed = seed  # every update's generator derives from it: the run's own randomness
    log_z, variance = tracker.log_evidence, tracker.log_evidence_stderr**2
    chunks: list[dict[str, float]] = []
    begin = time.perf_counter()
    for first in range(start, data.count, CHUNK):
        before, before_variance = tracker.log_evidence, tracker.log_evidence_stderr**2
        part = data.slice(first, min(first + CHUNK, data.count))
        info = tracker.update(part.x, part.y)
        chunks.append({
            "increment": tracker.log_evidence - before,
            "variance": tracker.log_evidence_stderr**2 - before_variance,
            "annealing_steps": info.annealing_steps,
        })
    increment = tracker.log_evidence - log_z
    return {
        "seed": seed,
        "increment": increment,
        "error": increment - truth,
        "stderr": math.sqrt(max(tracker.log_evidence_stderr**2 - variance, 0.0)),
        "seconds": time.perf_counter() - begin,
        "chunks": chunks,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    errors = [r["error"] for r in runs]
    z = [r["error"] / r["stderr"] for r in runs if r["stderr"] > 0]
    spread = statistics.stdev(errors) if len(errors) > 1 else math.nan
    return {
        "runs": len(runs),
        "mean_error": statistics.fmean(errors),
        "mean_error_se": spread / math.sqrt(len(errors)),
        "sd": spread,
        "rms_stderr": math.sqrt(statistics.fmean(r["stderr"] ** 2 for r in runs)),
        "rms_z": math.sqrt(statistics.fmean(v * v for v in z)) if z else math.nan,
        "coverage": sum(abs(v) <= 2 for v in z) / len(z) if z else math.nan,
        "median_seconds": statistics.median(r["seconds"] for r in runs),
    }


def variance_budget(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Across runs: Σ_k Var(X_k) of the chunks' increments, Σ_k of their mean reported
    variances, Var(Σ_k X_k), and the covariance between chunks, their difference."""
    chunks = len(runs[0]["chunks"])
    within = sum(statistics.variance([r["chunks"][k]["increment"] for r in runs])
                 for k in range(chunks))
    total = statistics.variance([sum(c["increment"] for c in r["chunks"]) for r in runs])
    return {
        "chunk_variance": within,
        "reported_chunk_variance": sum(
            statistics.fmean(r["chunks"][k]["variance"] for r in runs) for k in range(chunks)
        ),
        "total_variance": total,
        "between_chunks": total - within,
    }


def chunk_rows(
    runs: list[dict[str, Any]], start: int, truths: list[float] | None
) -> list[list[Any]]:
    """Per chunk: its rows, the mean error ± se (NaN without exact ``truths``), the
    increments' SD across runs, the RMS reported stderr and the mean annealing steps."""
    found = []
    for k in range(len(runs[0]["chunks"])):
        increments = [r["chunks"][k]["increment"] for r in runs]
        spread = statistics.stdev(increments)
        error = statistics.fmean(increments) - truths[k] if truths else math.nan
        found.append([
            f"{start + k * CHUNK}..{start + (k + 1) * CHUNK}", error,
            spread / math.sqrt(len(runs)), spread,
            math.sqrt(statistics.fmean(r["chunks"][k]["variance"] for r in runs)),
            statistics.fmean(r["chunks"][k]["annealing_steps"] for r in runs),
        ])
    return found


def variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, settings = text.partition("=")
    parsed = json.loads(settings or "{}")
    if not name or not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected NAME=JSON-object, got {text!r}")
    return name, parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=FAMILIES[:2], default="logistic")
    parser.add_argument("--stream", choices=STREAMS, default="iid")
    parser.add_argument("--dataset", type=int, default=0, help="calibration.py's data set index")
    parser.add_argument("--rows", type=int, default=10_000, help="N")
    parser.add_argument("--start", type=int, default=2_000, help=f"n0 (≤ {MAX_START})")
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument(
        "--variant", type=variant, action="append", metavar="NAME=JSON",
        help="SG-AIS settings to run from the shared start (repeatable; default: defaults)",
    )
    parser.add_argument(
        "--per-chunk", action="store_true",
        help="print each chunk's spread and reported stderr (linear: and mean error)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default="segment_bias.json")
    parser.add_argument("--quick", action="store_true", help="linear, N = 3000, n0 = 1000, 3 runs")
    args = parser.parse_args()
    if args.quick:
        args.family, args.rows, args.start, args.runs = "linear", 3_000, 1_000, 3
    if not 0 < args.start <= MAX_START or args.start % CHUNK or args.start >= args.rows:
        parser.error(f"--start must be a multiple of {CHUNK} in (0, {MAX_START}] below --rows")
    set_threads(args.threads)
    variants = args.variant or [("default", {})]
    data = data_set(args.family, args.stream, args.rows, args.dataset)
    cache_path = result_path(None, "calibration_references.json")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    # exchangeable models: all N reordered rows share the i.i.d. reference, a prefix has its own
    shared = args.stream if args.family == "linear" else "iid"
    key = f"{args.family}/{shared}/{args.rows}/{args.dataset}"
    whole = reference(args.family, data, key, cache)
    prefix = reference(
        args.family, data.slice(0, args.start),
        f"{args.family}/{args.stream}/{args.rows}/{args.dataset}/first{args.start}", cache,
    )
    truth = whole["log_z"] - prefix["log_z"]
    truths = exact_chunk_increments(data, args.start) if args.family == "linear" else None
    print(f"{args.family} {args.stream} data set {args.dataset}: log p(rows {args.start}.."
          f"{args.rows} | earlier) = {truth:.3f} (reference stderr "
          f"{math.hypot(whole['stderr'], prefix['stderr']):.3f})")
    began = time.perf_counter()
    state = start_state(args.family, data, args.start, args.particles)
    print(f"shared start: {time.perf_counter() - began:.1f} s")
    results = []
    for name, settings in variants:
        runs = []
        for seed in range(args.runs):
            runs.append(segment_run(args.family, data, args.start, state,
                                    {"particles": args.particles, **settings}, seed, truth))
            print(f"{name} seed {seed}: error {runs[-1]['error']:+.3f} stderr "
                  f"{runs[-1]['stderr']:.3f} {runs[-1]['seconds']:.1f} s", flush=True)
        results.append({"variant": name, "settings": settings, **summary(runs),
                        **(variance_budget(runs) if len(runs) > 1 else {}), "records": runs})
        if args.per_chunk and len(runs) > 1:
            print(table(["rows", "mean error", "± se", "SD", "RMS stderr", "steps"],
                        chunk_rows(runs, args.start, truths)))
    print(table(
        ["variant", "runs", "mean error", "± se", "SD", "RMS stderr", "RMS z", "within 2σ",
         "s/run"],
        [[r["variant"], r["runs"], r["mean_error"], r["mean_error_se"], r["sd"], r["rms_stderr"],
          r["rms_z"], r["coverage"], r["median_seconds"]] for r in results],
    ))
    if args.runs > 1:
        print(table(
            ["variant", "Σ Var(chunk)", "Σ reported", "Var(total)", "between chunks"],
            [[r["variant"], r["chunk_variance"], r["reported_chunk_variance"],
              r["total_variance"], r["between_chunks"]] for r in results],
        ))
    path = write_json("segment_bias", {
        "benchmark": "segment_bias",
        "family": args.family, "stream": args.stream, "dataset": args.dataset,
        "rows": args.rows, "start": args.start, "particles": args.particles,
        "truth": truth, "chunk_truths": truths,
        "reference_stderr": math.hypot(whole["stderr"], prefix["stderr"]),
        "environment": environment(args.threads),
        "variants": results,
    }, args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
