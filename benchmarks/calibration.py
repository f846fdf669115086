"""Calibration of SG-AIS's standard error (docs/design/standard-error.md).

Per cell (family × stream), ``--datasets`` independent data sets of ``--rows`` rows streamed in
500-row chunks through ``OnlineEvidence`` with default settings; per run z = (log Ẑ − log Z_ref)
/ √(stderr² + stderr_ref²). A cell reports its coverage (fraction of runs with |z| ≤ 2) and the
root mean square of z, for the standard error the code now reports (``standard_error =
"genealogy"``) and, from the same runs, the sum of per-step delta-method variances (SG-AIS
returns both; the estimate itself is the same).

Families: linear regression (5 inputs; exact log Z), softmax regression (10 inputs, 4 classes)
and the 2-D, 5-component mixture (reference: Laplace importance sampling on all rows, cached in
results/calibration_references.json; its stderr is 0.02–0.05 nats). Streams: ``iid``, and
``ordered`` with change points at rows 1000 and 5000 (of 1e4): for linear regression the weights
are redrawn from the prior at each change (as in shift.py); for the other two the i.i.d. rows are
reordered so that the first 1000 have the smallest first coordinate, the next 4000 the next
smallest (so the reference is the i.i.d. one: the models are exchangeable).

    python benchmarks/calibration.py                         # 30 data sets per cell, N = 1e4
    python benchmarks/calibration.py --families linear       # one family
    python benchmarks/calibration.py --quick                 # N = 2000, 4 data sets
    python benchmarks/calibration.py --families linear --streams ordered \
        --settings '{"particles": 256}' --first 15 --datasets 15  # other settings, sets 15-29
    python benchmarks/calibration.py --families logistic --seed 100  # the same data sets, other
                                                                     # engine seeds (i + 100)
    python benchmarks/calibration.py --families logistic --streams iid --datasets 0 \
        --pool a.json b.json --output pooled.json  # cells judged over earlier outputs' runs

Over 30 runs an exactly calibrated stderr gives an RMS z anywhere in 0.75–1.25 (95%), wider than
the 0.85–1.15 target, so a 30-run verdict near the edge is a coin toss; over 90 runs (three
engine seeds per data set, run in parallel with ``--seed`` and joined with ``--pool``) the range
is 0.85–1.15, the target itself. Where a cell holds several engine seeds of the same data sets,
it also reports what that many independent particle systems (islands) would read with their Ẑ
averaged per data set and the delta-method stderr of the average (``averaged_systems``), and
splits the errors' spread into the noise between engine seeds on the same rows, against the
reported stderr, and an error that repeats on the same rows (``replicate_spread``): a stderr can
only be asked to cover the first.

Each run also records ``stderr_lagged``: the stderr with the covariance between pieces up to L − 1
apart counted, from the genealogy across pieces with Eves at each window's first piece
(``lagged_variances``), and each cell the RMS z each would give, its error moved by the change of
the lognormal correction σ̂²/2: a diagnostic of what the reported stderr leaves out, not what the
engine reports. L = 1, each piece's Eves at its own start, leaves out the Eves carried across
the selection that ends a widened piece (docs/design/standard-error.md#eves-across-a-selection):
the same paths, so the column compares the two on the same runs.

Writes results/calibration.json and calibration.png; a run named by ``--output NAME`` (a
replicate, other settings) goes to results/runs/NAME, where ``--pool NAME`` finds it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Iterable
from typing import Any

import torch
from _common import (
    earlier_result,
    environment,
    exact_steps,
    linear_stream,
    logistic_data,
    mixture_data,
    replicate_spread,
    result_path,
    set_threads,
    spread_line,
    table,
    verdict,
    write_json,
)
from scipy.stats import chi2
from torch import Tensor

from modelcompare.estimators import EstimatorError, OnlineEvidence
from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.data.rng import derive_seed
from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.islands import averaged
from modelcompare.estimators.online.kernel import Annealed
from modelcompare.estimators.online.spread import FROZEN, WIDE
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, run_laplace_is
from modelcompare.estimators.smc.genealogy import eve_variance, first_generation
from modelcompare.estimators.smc.tempered import StepInfo
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression, Model
from modelcompare.service.core.config import Settings

CHUNK, CHANGES = 500, (1_000, 5_000)
# the plain engine: delta-method stderr, re-anchoring on growth only, no extra moves, the
# same ladder and moves for every step of a piece, plain increments
MAIN = {"standard_error": "delta", "anchor_drift": 1000.0, "surprise_moves": 0,
        "careful_ess_target": 0.8, "careful_move_steps": 20, "reestimate_growth": 0.0,
        "increment_control": "none"}
COVERAGE_TARGET, RMS_Z_RANGE = 0.90, (0.85, 1.15)
# an update past this fraction of diverged trajectories marks a model unreliable in the service
DIVERGED_WARNING = Settings.model_fields["diverged_warning_fraction"].default
# lagged genealogy variances for windows of up to this many pieces (``lagged_variances``)
LAGS = 8
FAMILIES = ("linear", "logistic", "mixture")
STREAMS = ("iid", "ordered")


def build(family: str) -> Model:
    if family == "linear":
        return LinearRegression(5)
    if family == "logistic":
        return LogisticRegression(10, classes=4)
    return GaussianMixture(2, 5)


def linear_shifted(rows: int, seed: int) -> Rows:
    """y = wᵀx + b + N(0, 1), (w, b) redrawn from the prior at each change point."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(len(CHANGES) + 1, 6, generator=g, dtype=torch.float64)
    x = torch.randn(rows, 5, generator=g, dtype=torch.float64)
    chosen = weights[torch.bucketize(torch.arange(rows), torch.tensor(CHANGES), right=True)]
    noise = torch.randn(rows, generator=g, dtype=torch.float64)
    return Rows(x, (x * chosen[:, :-1]).sum(1) + chosen[:, -1] + noise)


def regimes_by_first_coordinate(rows: Rows) -> Rows:
    """The rows reordered: the smallest first coordinates first, in blocks cut at CHANGES (each
    block in its original order)."""
    values = rows.x[:, 0]
    rank = torch.empty(rows.count, dtype=torch.long)
    rank[torch.argsort(values)] = torch.arange(rows.count)
    block = torch.bucketize(rank, torch.tensor(CHANGES), right=True)
    order = torch.argsort(block * rows.count + torch.arange(rows.count))
    return rows.take(order)


def data_set(family: str, stream: str, rows: int, index: int) -> Rows:
    seed = derive_seed("calibration-data", family, index)
    if family == "linear":
        if stream == "ordered":
            return linear_shifted(rows, seed)
        parts = list(linear_stream(rows, seed, 5, rows))
        return Rows(parts[0][0], parts[0][1])
    if family == "logistic":
        iid = Rows(*logistic_data(rows, seed, 10, 4))
    else:
        iid = Rows(mixture_data(rows, seed), None)
    return regimes_by_first_coordinate(iid) if stream == "ordered" else iid


def reference(family: str, data: Rows, key: str, cache: dict[str, Any]) -> dict[str, Any]:
    """Exact log Z (linear) or Laplace-IS on all rows, cached by ``key``."""
    if key in cache:
        return cache[key]
    model = build(family)
    if family == "linear":
        exact = OnlineEvidence(model, method="exact")
        exact.update(data.x, data.y)
        found = {"log_z": exact.log_evidence, "stderr": 0.0, "method": "exact"}
    else:
        try:
            result = run_laplace_is(
                model, data, LaplaceISSettings(), torch.Generator().manual_seed(len(cache))
            )
            found = {
                "log_z": result.evidence.log_evidence,
                "stderr": result.evidence.log_evidence_stderr,
                "pareto_k": result.pareto_k,
                "method": "laplace_is",
            }
        except EstimatorError as error:
            found = {"log_z": math.nan, "stderr": math.nan, "error": str(error)}
    cache[key] = found
    return found


def run(family: str, data: Rows, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """One stream through SG-AIS; log Ẑ, both standard errors, the seconds the genealogy
    variance took as a fraction of the updates', and the largest fraction of SGHMC trajectories
    one update undid as diverged (``diverged_fraction``; 0 where every move was exact) with the
    rows seen when it first exceeded the service's warning threshold (``flagged_at``; None:
    never, so the service would report the run's log Z as reliable), and the rows at which log Z
    was re-estimated over the shuffled rows (``restarts``; with ``reestimate_growth``), and the
    smallest and largest spread of the cloud measured (``min_spread``, ``max_spread``: about 1
    where it follows the posterior) with the rows seen when it first read frozen (``frozen_at``)
    or wide (``wide_at``), and the annealing steps of each chunk (``ladders``) beside those of the
    exact phase (``exact_steps``: re-estimates count a piece longer than it as astray)."""
    delta_variance, update_seconds, diverged, flagged_at = 0.0, 0.0, 0.0, None
    restarts: list[int] = []  # rows at which log Z was re-estimated (``reestimate_growth``)
    ladders: list[int] = []
    min_spread, max_spread, frozen_at, wide_at = math.inf, -math.inf, None, None
    original = standard_error.RULES["genealogy"]
    genealogy = Timed(original)
    recorded = Recorded(genealogy)
    # the kernel takes its variance rule when it is built
    standard_error.RULES["genealogy"] = recorded
    tracker = OnlineEvidence(build(family), seed=seed, **settings)
    try:
        for start in range(0, data.count, CHUNK):
            part = data.slice(start, min(start + CHUNK, data.count))
            before = len(recorded.pieces)
            begin = time.perf_counter()
            info = tracker.update(part.x, part.y)
            update_seconds += time.perf_counter() - begin
            ladders.append(info.annealing_steps)
            delta_variance += info.delta_method_variance
            if info.reestimated:
                restarts.append(tracker.n_observations)
                # the pass's pieces, recorded after the chunk's in-order ones, replace the past
                del recorded.pieces[: before + info.sub_chunks]
            if not math.isnan(info.spread):
                min_spread, max_spread = min(min_spread, info.spread), max(max_spread, info.spread)
                if frozen_at is None and info.spread < FROZEN:
                    frozen_at = tracker.n_observations
                if wide_at is None and info.spread > WIDE:
                    wide_at = tracker.n_observations
            if not math.isnan(info.diverged_fraction):
                diverged = max(diverged, info.diverged_fraction)
                if flagged_at is None and info.diverged_fraction > DIVERGED_WARNING:
                    flagged_at = tracker.n_observations
    except EstimatorError as error:  # counted as a failed run of its cell, not a crash
        return {"log_z": math.nan, "stderr": math.nan, "stderr_delta": math.nan,
                "seconds": update_seconds, "genealogy_fraction": math.nan,
                "max_diverged_fraction": diverged, "flagged_at": flagged_at,
                "restarts": restarts, "min_spread": finite_or_none(min_spread),
                "max_spread": finite_or_none(max_spread), "frozen_at": frozen_at,
                "wide_at": wide_at, "ladders": ladders, "exact_steps": exact_steps(tracker),
                "failed": f"row {start}: {error}"}
    finally:
        standard_error.RULES["genealogy"] = original
    return {
        "log_z": tracker.log_evidence,
        "stderr": tracker.log_evidence_stderr,
        "stderr_delta": math.sqrt(delta_variance),
        "seconds": update_seconds,
        "genealogy_fraction": genealogy.seconds / update_seconds,
        "max_diverged_fraction": diverged,
        "flagged_at": flagged_at,
        "restarts": restarts,
        "min_spread": finite_or_none(min_spread),
        "max_spread": finite_or_none(max_spread),
        "frozen_at": frozen_at,
        "wide_at": wide_at,
        "ladders": ladders,
        "exact_steps": exact_steps(tracker),
        # one system's pieces in order (``islands`` interleave several systems' pieces)
        "stderr_lagged": [math.sqrt(max(v, 0.0)) for v in lagged_variances(recorded.pieces)]
        if recorded.pieces and settings.get("islands", 1) == 1 else None,
    }


def lagged_variances(pieces: list[tuple[Tensor, tuple[StepInfo, ...]]]) -> list[float]:
    """Var(log Ẑ) counting the covariance of pieces up to L − 1 apart, for L = 1..``LAGS``.

    Summing each piece's Eve variance (``smc.genealogy``, Eves at the piece's start) takes the
    pieces' increments X_k as uncorrelated. With W(j, k) the Eve variance of pieces j..k from
    Eves at the start of piece j, W(j, k) − W(j, k − 1) ≈ Var X_k + 2 Σ_{j ≤ i < k} Cov(X_i, X_k),
    so Σ_k [W(k − L + 1, k) − W(k − L + 1, k − 1)] estimates Σ_k Var X_k +
    2 Σ_{0 < k − i < L} Cov(X_i, X_k). L = 1 is the variance reported before
    Eves were carried across a widened piece's last selection (``particles.genealogy_variance``
    now does so: the stderr reported counts that selection in the next piece); a long
    window's genealogy collapses onto few Eves and reads low. A piece whose careful steps ran
    with more particles (``careful_particles``) ends with a selection back to M whose ancestors
    no step records: windows start after it, so its covariance with later pieces is left out."""
    # a piece whose selection widened the cloud, even at its last step (its narrowing back to M
    # is in no step)
    widened = [any(info.ancestors is not None and info.ancestors.shape[0] != initial.shape[0]
                   for info in steps)
               for initial, steps in pieces]

    def window(first: int, last: int) -> float:
        if last < first:
            return 0.0
        steps = [info for index in range(first, last + 1) for info in pieces[index][1]]
        return eve_variance(first_generation(pieces[first][0]), steps)

    def first(last: int, lag: int) -> int:
        earliest = max(0, last - lag + 1)
        return max([earliest] + [i + 1 for i in range(earliest, last) if widened[i]])

    def increment(last: int, lag: int) -> float:
        start = first(last, lag)
        return window(start, last) - window(start, last - 1)

    return [sum(increment(k, lag) for k in range(len(pieces))) for lag in range(1, LAGS + 1)]


RunKey = tuple[str, str, int, int]  # family, stream, data set, engine seed


def pooled_runs(
    paths: list[str], rows: int, families: list[str], streams: list[str], planned: set[RunKey]
) -> list[dict[str, Any]]:
    """The runs of earlier outputs ``paths`` (found as ``--output`` is) on ``rows`` rows of
    the chosen families and streams. A run found twice, in two outputs or in one and among the
    ``planned`` runs of this invocation, is an error: counting it twice would narrow the cell's
    chance range for nothing."""
    found: list[dict[str, Any]] = []
    seen = set(planned)
    for path in paths:
        for r in json.loads(earlier_result(path).read_text())["runs"]:
            if r["rows"] != rows or r["family"] not in families or r["stream"] not in streams:
                continue
            key = (r["family"], r["stream"], r["dataset"], r["seed"])
            if key in seen:
                raise SystemExit(f"{path}: run {key} is already pooled or about to be run")
            seen.add(key)
            found.append(r)
    return found


def averaged_systems(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each data set's runs (independent particle systems: other engine seeds, same rows)
    joined into one estimate, as ``islands`` K of M particles would report it
    (``online.islands.averaged``: Ẑ averaged over the raw log Ẑ_k = reported − σ̂_k²/2, its
    delta-method variance, and the same + σ̂²/2). Only data sets with at least two finite
    runs; ``systems`` is their count K."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if math.isfinite(r.get("error", math.nan)):
            groups.setdefault((r["family"], r["stream"], r["dataset"]), []).append(r)
    joined = []
    for (family, stream, dataset), members in groups.items():
        if len(members) < 2:
            continue
        log_mean, variance = averaged(
            torch.tensor([r["log_z"] - r["stderr"] ** 2 / 2 for r in members],
                         dtype=torch.float64),
            torch.tensor([r["stderr"] ** 2 for r in members], dtype=torch.float64),
        )
        log_z = log_mean + variance / 2
        reference = members[0]["reference"]
        joined.append({
            "family": family, "stream": stream, "dataset": dataset, "systems": len(members),
            "reference": reference, "reference_stderr": members[0]["reference_stderr"],
            "log_z": log_z, "error": log_z - reference, "stderr": math.sqrt(variance),
        })
    return joined


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


class Timed:
    """A function that adds up the seconds spent in it."""

    def __init__(self, function: Any) -> None:
        self.function, self.seconds = function, 0.0

    def __call__(self, *args: Any) -> Any:
        begin = time.perf_counter()
        try:
            return self.function(*args)
        finally:
            self.seconds += time.perf_counter() - begin


class Recorded:
    """``standard_error.genealogy``, keeping each piece's starting weights and steps."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.pieces: list[tuple[Tensor, tuple[StepInfo, ...]]] = []

    def __call__(
        self, before: ParticleState, after: ParticleState, piece: Annealed
    ) -> tuple[float, ParticleState]:
        self.pieces.append((before.log_weights, piece.steps))
        return self.function(before, after, piece)


def lagged_rms_z(runs: list[dict[str, Any]]) -> list[float]:
    """RMS z of the runs with the variance of each lag L = 1..``LAGS`` (``lagged_variances``)."""
    lagged = [r for r in runs if r.get("stderr_lagged")]
    return [
        calibration([{**r, "lagged": r["stderr_lagged"][lag],
                      "lagged_error": r["error"] + (r["stderr_lagged"][lag] ** 2
                                                    - r["stderr"] ** 2) / 2}
                     for r in lagged], "lagged_error", "lagged")["rms_z"]
        for lag in range(LAGS)
    ]


def calibration(runs: list[dict[str, Any]], error: str, stderr: str) -> dict[str, float]:
    """Coverage of ±2 stderr and RMS z over the runs that have ``error`` and a reference."""
    usable = [r for r in runs if error in r and math.isfinite(r[error])]
    # a run that raised (EstimatorError) where its reference exists
    failed = sum(error in r and math.isfinite(r["reference"]) and not math.isfinite(r[error])
                 for r in runs)
    z = [r[error] / math.sqrt(r[stderr] ** 2 + r["reference_stderr"] ** 2) for r in usable]
    if not z:
        return {"runs": 0, "failed": failed, "coverage": math.nan, "rms_z": math.nan,
                "rms_z_if_calibrated": (math.nan, math.nan), "mean_error": math.nan}
    return {
        "runs": len(z),
        "failed": failed,
        "coverage": sum(abs(v) <= 2.0 for v in z) / (len(z) + failed),  # a failure misses
        "rms_z": math.sqrt(statistics.fmean(v * v for v in z)),
        "rms_z_if_calibrated": calibrated_rms_z_range(len(z)),
        "mean_error": statistics.fmean(r[error] for r in usable),
        "median_abs_error": statistics.median(abs(r[error]) for r in usable),
    }


def calibrated_rms_z_range(runs: int) -> tuple[float, float]:
    """The central 95% range of RMS z over ``runs`` runs of an exactly calibrated estimator
    (z ~ N(0, 1), so runs · RMS z² ~ χ²(runs)): how far RMS z strays by chance alone."""
    low, high = chi2.ppf([0.025, 0.975], runs)
    return math.sqrt(low / runs), math.sqrt(high / runs)


def finite_median(values: Iterable[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def meets(cell: dict[str, float]) -> bool:
    low, high = RMS_Z_RANGE
    return cell["coverage"] >= COVERAGE_TARGET and low <= cell["rms_z"] <= high


def plot(cells: list[dict[str, Any]], path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{c['family']}\n{c['stream']}" for c in cells]
    positions = range(len(cells))
    for axis, key, target in (
        (axes[0], "coverage", [COVERAGE_TARGET]),
        (axes[1], "rms_z", list(RMS_Z_RANGE)),
    ):
        bars = (("main", "grey", "plain engine"), ("genealogy", "C0", "defaults"))
        for shift, (method, colour, label) in zip((-0.2, 0.2), bars, strict=True):
            values = [c[method][key] for c in cells]
            axis.bar([p + shift for p in positions], values, 0.4, color=colour, label=label)
        for value in target:
            axis.axhline(value, color="k", linestyle=":")
        axis.set_xticks(list(positions), labels, fontsize=8)
        axis.set_title({"coverage": "coverage of ±2 stderr", "rms_z": "RMS z"}[key])
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--streams", nargs="+", choices=STREAMS, default=list(STREAMS))
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--datasets", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default="calibration.json")
    parser.add_argument("--quick", action="store_true", help="N = 2000, 4 data sets")
    parser.add_argument(
        "--baseline", action="store_true",
        help="also run each data set with the plain engine's settings (MAIN)",
    )
    parser.add_argument(
        "--settings", type=json.loads, default={}, help="SG-AIS settings as JSON object"
    )
    parser.add_argument("--first", type=int, default=0, help="index of the first data set")
    parser.add_argument(
        "--seed", type=int, default=0,
        help="data set i runs with engine seed i + this (a replicate of the same data sets)",
    )
    parser.add_argument(
        "--pool", nargs="+", default=[], metavar="JSON",
        help="also count the runs of these earlier outputs (same rows, the chosen families and "
        "streams) in the cells: replicates run in parallel, judged together",
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.datasets = 2_000, 4
    set_threads(args.threads)
    cache_path = result_path(None, "calibration_references.json")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    output = result_path(args.output, "calibration.json")
    previous = json.loads(output.read_text()) if output.exists() else {}
    runs = [  # runs of other families/streams from an earlier invocation are kept
        r
        for r in previous.get("runs", [])
        if r["rows"] == args.rows
        and not (r["family"] in args.families and r["stream"] in args.streams)
    ]
    planned = {
        (family, stream, index, index + args.seed)
        for family in args.families
        for stream in args.streams
        for index in range(args.first, args.first + args.datasets)
    }
    runs += pooled_runs(args.pool, args.rows, args.families, args.streams, planned)
    for family in args.families:
        for stream in args.streams:
            for index in range(args.first, args.first + args.datasets):
                data = data_set(family, stream, args.rows, index)
                # exchangeable models: the reordered rows share the i.i.d. rows' reference
                shared = stream if family == "linear" else "iid"
                known = len(cache)
                ref = reference(family, data, f"{family}/{shared}/{args.rows}/{index}", cache)
                if len(cache) > known:  # written only when new: concurrent runs share the file
                    write_json("calibration_references", cache, cache_path)
                result = run(family, data, index + args.seed, args.settings)
                if args.baseline:
                    main_run = run(family, data, index + args.seed, MAIN)
                    result["main_error"] = main_run["log_z"] - ref["log_z"]
                    result["main_stderr"] = main_run["stderr"]
                    result["main_seconds"] = main_run["seconds"]
                record = {
                    "family": family,
                    "stream": stream,
                    "rows": args.rows,
                    "dataset": index,
                    "seed": index + args.seed,
                    "reference": ref["log_z"],
                    "reference_stderr": ref["stderr"],
                    "error": result["log_z"] - ref["log_z"],
                    **result,
                }
                runs.append(record)
                print(
                    f"{family:8s} {stream:7s} {index:2d} error {record['error']:+7.2f} "
                    f"stderr {result['stderr']:.2f} (delta {result['stderr_delta']:.2f}) "
                    f"{result['seconds']:.1f} s, diverged ≤ {result['max_diverged_fraction']:.2f}"
                    + (f" (flagged at row {result['flagged_at']})" if result["flagged_at"] else "")
                    + (f", frozen at row {result['frozen_at']}" if result["frozen_at"] else "")
                    + (f", wide at row {result['wide_at']}" if result["wide_at"] else "")
                    + (
                        f"; main error {result['main_error']:+7.2f} ± {result['main_stderr']:.2f}"
                        if args.baseline
                        else ""
                    ),
                    flush=True,
                )
    cells = []
    for family in FAMILIES:
        for stream in STREAMS:
            mine = [r for r in runs if r["family"] == family and r["stream"] == stream]
            if not mine:
                continue
            cell = {
                "family": family,
                "stream": stream,
                "genealogy": calibration(mine, "error", "stderr"),
                "delta": calibration(mine, "error", "stderr_delta"),
                "main": calibration(mine, "main_error", "main_stderr"),
                "genealogy_fraction": finite_median(r["genealogy_fraction"] for r in mine),
                "stderr_ratio": finite_median(r["stderr"] / r["stderr_delta"] for r in mine),
                "lagged_rms_z": lagged_rms_z(mine),
            }
            spread = replicate_spread(mine)
            if spread:
                cell["replicates"] = spread
            joined = averaged_systems(mine)
            if joined:
                cell["averaged"] = {**calibration(joined, "error", "stderr"),
                                    "systems": sorted({r["systems"] for r in joined})}
            cells.append(cell)
    print(
        f"\nN = {args.rows:,}: coverage of ±2 stderr (target ≥ {COVERAGE_TARGET:.0%}) and RMS z "
        f"(target {RMS_Z_RANGE[0]}–{RMS_Z_RANGE[1]}); 'main' = the plain engine (MAIN)\n"
        + table(
            [
                "family",
                "stream",
                "runs",
                "failed",
                "mean err",
                "coverage",
                "RMS z",
                "RMS z by chance",
                "verdict",
                "delta cov",
                "delta RMS z",
                "stderr/delta",
                "main runs",
                "main mean err",
                "main cov",
                "main RMS z",
                "stderr cost",
            ],
            [
                [
                    c["family"],
                    c["stream"],
                    c["genealogy"]["runs"],
                    c["genealogy"]["failed"],
                    c["genealogy"]["mean_error"],
                    c["genealogy"]["coverage"],
                    c["genealogy"]["rms_z"],
                    "{:.2f}–{:.2f}".format(*c["genealogy"]["rms_z_if_calibrated"]),
                    verdict(meets(c["genealogy"])),
                    c["delta"]["coverage"],
                    c["delta"]["rms_z"],
                    c["stderr_ratio"],
                    c["main"]["runs"],
                    c["main"]["mean_error"],
                    c["main"]["coverage"],
                    c["main"]["rms_z"],
                    f"{c['genealogy_fraction']:.2%}",
                ]
                for c in cells
            ],
        )
        + "\n'RMS z by chance': the 95% range of RMS z that an exactly calibrated stderr gives "
        "over this many runs (χ²)\n'delta': the sum of per-step delta-method variances on "
        "the same runs; 'main': "
        "separate runs with the plain engine's settings (MAIN: no drift re-anchoring or surprise "
        "moves)"
    )
    print(f"\nRMS z with the covariance of pieces up to L − 1 apart (L = 1..{LAGS}; L = 1: Eves "
          "at each piece's start):")
    for c in cells:
        print(f"{c['family']:>8s} {c['stream']:>7s}  "
              + "  ".join(f"{z:.3f}" for z in c["lagged_rms_z"]))
    for c in cells:
        if "averaged" in c:
            a = c["averaged"]
            print(f"{c['family']:>8s} {c['stream']:>7s}  {a['runs']} data sets, each its "
                  f"{'/'.join(map(str, a['systems']))} engine seeds' Ẑ averaged "
                  f"(averaged_systems): mean err {a['mean_error']:+.3f}, coverage "
                  f"{a['coverage']:.3f}, RMS z {a['rms_z']:.3f} ({verdict(meets(a))})")
    for c in cells:
        if "replicates" in c:
            s = c["replicates"]
            print(f"{c['family']:>8s} {c['stream']:>7s}  {s['runs']} runs on {s['data_sets']} "
                  f"data sets (replicate_spread): {spread_line(s)}")
    payload = {
        "benchmark": "calibration",
        "settings": {**vars(args), "chunk": CHUNK, "changes": CHANGES},
        "environment": environment(args.threads),
        "targets": {"coverage": COVERAGE_TARGET, "rms_z": RMS_Z_RANGE},
        "cells": cells,
        "runs": runs,
    }
    print(f"\nwrote {write_json('calibration', payload, output)}")
    png = plot(cells, str(output.with_suffix(".png")))
    if png:
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
