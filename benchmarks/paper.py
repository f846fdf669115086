"""Head-to-head evidence benchmark on the three models of the SG-AIS literature.

Linear regression (5 inputs + bias, exact evidence), softmax logistic regression (10 inputs,
4 classes, 44 parameters) and a diagonal Gaussian mixture (2-D, 5 components, 25 parameters),
simulated data sizes on a log grid. Per model and N: log Z / N and wall time for
- the online estimators, each in ONE pass over the stream in 500-row chunks (the estimate at
  every grid N is read off the same pass; time is cumulative): ``sgais``, ``sequential`` (SGHMC
  without annealing), ``hybrid`` (nested sampling on the first rows, SG-AIS after) and ``exact``;
- the full-data references, one run per N on the first N rows: ``ais``, ``nested`` (own),
  ``dynesty`` and ``laplace_is`` (importance sampling from a Student-t at the posterior mode,
  relabeled over the mixture's K! component orders; its cells carry the weights' ESS and Pareto
  k̂, and it counts as a reference only while k̂ < 0.7).

Times are CPU seconds of the process (``time.process_time``, one torch thread): the development
machine is shared, and CPU time is what a loaded box does not distort; wall seconds are recorded
alongside. A reference cell runs in a child process, killed after ``--wall-factor`` × its CPU
budget (``--budget-s``) in wall seconds. Before
running it, its time is predicted as T̂(N) = Ê(N) · t(N): Ê(N) the per-particle full-data
likelihood evaluations, fitted as a + b·ln N over the completed smaller-N runs of that method and
model (one run: held constant), and t(N) the measured seconds of one per-particle evaluation on the
N rows (``evaluation_seconds``). Cells predicted over budget, or killed at the limit, are marked
"extrapolated" with T̂(N) and no log Z. Finished cells are cached in
``results/paper_cells.json``, so a re-run resumes.

    python benchmarks/paper.py --quick                  # N = 1e2..1e4, small budgets
    nice python benchmarks/paper.py --max-n 1e6 --budget-s 1200
    python benchmarks/paper.py --models linear --max-n 1e5

Writes results/paper_<model>.json and results/paper_<model>.png (log Z / N vs N with 2·stderr
error bars; runtime vs N on log axes) and prints the agreement and speed verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import multiprocessing
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from _common import (
    RESULTS,
    environment,
    linear_stream,
    logistic_data,
    mixture_data,
    result_path,
    set_threads,
    table,
    verdict,
    write_json,
)
from scipy.special import ndtri

from modelcompare.estimators import OnlineEvidence, Rows
from modelcompare.estimators.data.rng import derive_generator, derive_seed
from modelcompare.estimators.references.batch import (
    full_log_likelihood,
    full_log_likelihood_and_grad,
)
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression, Model

ONLINE = ("sgais", "sequential", "hybrid", "exact")
REFERENCES = ("ais", "nested", "dynesty", "laplace_is")
PARETO_K_LIMIT = 0.7  # above it, importance-sampling standard errors are not trustworthy
AGREEMENT_PER_ROW, SPEED_TARGET = 1e-5, 20.0


def build(name: str) -> Model:
    return {
        "linear": lambda: LinearRegression(5),
        "logistic": lambda: LogisticRegression(10, classes=4),
        "mixture": lambda: GaussianMixture(2, 5),
    }[name]()


def simulate(name: str, rows: int, seed: int) -> Rows:
    """The model's stream; every grid N uses its first N rows."""
    data_seed = derive_seed("paper-data", name, seed)
    if name == "linear":
        parts = list(linear_stream(rows, data_seed, 5, 10_000))
        return Rows(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))
    if name == "logistic":
        return Rows(*logistic_data(rows, data_seed, 10, 4))
    return Rows(mixture_data(rows, data_seed), None)


def run_online(
    model: Model, method: str, rows: Rows, grid: list[int], args: Any, save: Callable[[dict], None]
) -> dict:
    """One pass in ``args.post``-row chunks; log Z, stderr and cumulative seconds at grid N
    (each point is also passed to ``save`` as it comes, so a stopped pass keeps its points)."""
    settings = {} if method == "exact" else {"particles": args.particles}
    tracker = OnlineEvidence(model, method=method, seed=args.seed, **settings)
    points, elapsed, wall, last = [], 0.0, 0.0, max(grid)
    stops = sorted({*range(args.post, last, args.post), *grid})  # chunks also end at grid N
    for start, stop in zip([0, *stops[:-1]], stops, strict=True):
        piece = rows.slice(start, stop)
        begin, begin_wall = time.process_time(), time.perf_counter()
        tracker.update(piece.x, piece.y)
        elapsed += time.process_time() - begin
        wall += time.perf_counter() - begin_wall
        n = tracker.n_observations
        if n in grid:
            points.append(
                {
                    "n": n,
                    "log_z": tracker.log_evidence,
                    "stderr": tracker.log_evidence_stderr,
                    "seconds": elapsed,
                    "wall_seconds": wall,
                }
            )
            save({"points": points, "partial": n < last})
    return {"points": points}


def prior_transform(model: Model) -> tuple[int, Callable[[np.ndarray], np.ndarray]]:
    """Unit cube -> the model's unconstrained θ, distributed as its prior (for dynesty): the
    first ``param_dim`` outputs are θ, any further ones auxiliary (unused by the likelihood)."""
    if isinstance(model, LinearRegression):
        return model.param_dim, lambda u: model.prior_std * ndtri(u)
    if isinstance(model, LogisticRegression):
        return model.param_dim, ndtri
    assert isinstance(model, GaussianMixture)
    k, kd = model.components, model.components * model.input_dim

    def transform(u: np.ndarray) -> np.ndarray:
        # Dirichlet(1): E_k = −log u_k ~ Gamma(1), z_k = log E_k − log E_K (one extra cube axis).
        log_e = np.log(-np.log(u[:k]))
        # σ² ~ InvGamma(1, 1) is 1 / Gamma(1, 1); μ | σ² ~ N(0, 4σ²).
        log_var = -np.log(-np.log(u[k : k + kd]))
        means = 2.0 * np.exp(0.5 * log_var) * ndtri(u[k + kd :])
        return np.concatenate([log_e[:-1] - log_e[-1], means, log_var, log_e[-1:]])

    return k + 2 * kd, transform


def run_dynesty(model: Model, rows: Rows, live_points: int, seed: int) -> dict:
    import dynesty

    ndim, transform = prior_transform(model)

    def log_likelihood(theta: np.ndarray) -> float:
        value = full_log_likelihood(model, torch.from_numpy(theta[None, : model.param_dim]), rows)
        return float(value[0]) if torch.isfinite(value[0]) else -1e300

    sampler = dynesty.NestedSampler(
        log_likelihood,
        transform,
        ndim,
        nlive=live_points,
        rstate=np.random.default_rng(seed),
    )
    sampler.run_nested(dlogz=0.01, print_progress=False)
    result = sampler.results
    return {
        "log_z": float(result.logz[-1]),
        "stderr": float(result.logzerr[-1]),
        "iterations": int(result.niter),
        "evaluations": int(np.sum(result.ncall)),
    }


def run_reference(name: str, method: str, rows: Rows, args: Any) -> dict:
    """One full-data reference run on ``rows`` (called in a child process)."""
    set_threads(args.threads)
    model = build(name)
    generator = derive_generator(args.seed, "paper", name, method, rows.count)
    begin, begin_wall = time.process_time(), time.perf_counter()
    if method == "dynesty":
        out = run_dynesty(model, rows, args.live_points, derive_seed(args.seed, rows.count))
    else:
        extra: dict[str, float] = {}
        if method == "ais":
            from modelcompare.estimators.references.ais import AISSettings, run_ais

            result = run_ais(model, rows, AISSettings(), generator)
        elif method == "laplace_is":
            from modelcompare.estimators.references.laplace_importance import (
                LaplaceISSettings,
                run_laplace_is,
            )

            found = run_laplace_is(model, rows, LaplaceISSettings(), generator)
            result, extra = found.evidence, {"ess": found.ess, "pareto_k": found.pareto_k}
        else:
            from modelcompare.estimators.references.nested import NestedSettings, run_nested

            config = NestedSettings(live_points=args.live_points)
            result = run_nested(model, rows, config, generator)
        out = {
            "log_z": result.log_evidence,
            "stderr": result.log_evidence_stderr,
            "iterations": result.iterations,
            "evaluations": result.likelihood_evaluations,
            **extra,
        }
    return {
        **out,
        "seconds": time.process_time() - begin,
        "wall_seconds": time.perf_counter() - begin_wall,
    }


def _child(queue: Any, *arguments: Any) -> None:
    try:
        queue.put(run_reference(*arguments))
    except Exception as exc:
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def run_limited(
    name: str, method: str, rows: Rows, args: Any, limit: float
) -> tuple[dict | None, float]:
    """``run_reference`` in a forked child killed after ``limit`` wall seconds: (its result or
    None when killed, the child's CPU seconds at the end)."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue, name, method, rows, args))
    child.start()
    watch = psutil.Process(child.pid)
    used = 0.0
    try:
        return queue.get(timeout=limit), used
    except Exception:
        with contextlib.suppress(psutil.Error):
            times = watch.cpu_times()
            used = times.user + times.system
        return None, used
    finally:
        child.kill()
        child.join()


def evaluation_seconds(model: Model, rows: Rows, gradient: bool, repeats: int = 3) -> float:
    """Seconds of one per-particle full-data evaluation on ``rows`` (64 particles at once)."""
    theta = model.sample_prior(64, torch.Generator().manual_seed(0))
    best = math.inf
    for _ in range(repeats):
        begin = time.process_time()
        if gradient:
            full_log_likelihood_and_grad(model, theta, rows)
        else:
            full_log_likelihood(model, theta, rows)
        best = min(best, time.process_time() - begin)
    return best / 64


def fitted_evaluations(done: list[dict], n: int) -> float:
    """Ê(N) = a + b·ln N, least squares over completed runs (one run: its count), never below
    the count of the largest completed run (``done`` is sorted by N)."""
    if len(done) == 1:
        return float(done[0]["evaluations"])
    logs = np.log([d["n"] for d in done])
    b, a = np.polyfit(logs, [d["evaluations"] for d in done], 1)
    return float(max(a + b * math.log(n), done[-1]["evaluations"]))


def reference_cell(name: str, method: str, rows: Rows, n: int, done: list[dict], args: Any):
    """Run one reference cell within budget, or return its extrapolated time."""
    prefix = rows.slice(0, n)
    per_eval = evaluation_seconds(build(name), prefix, gradient=method in ("ais", "nested"))
    predicted = fitted_evaluations(done, n) * per_eval if done else None
    base = {"n": n, "method": method, "evaluation_seconds": per_eval}
    if predicted is not None and predicted > args.budget_s:
        return {
            **base,
            "status": "extrapolated",
            "seconds": predicted,
            "reason": f"predicted {predicted:.0f} s > budget {args.budget_s:.0f} s",
        }
    result, used = run_limited(name, method, prefix, args, args.budget_s * args.wall_factor)
    if result is None:
        return {
            **base,
            "status": "extrapolated",
            "seconds": max(predicted or 0.0, used),
            "cpu_seconds_when_killed": used,
            "reason": f"killed at {args.budget_s * args.wall_factor:.0f} wall s",
        }
    if "error" in result:
        return {**base, "status": "failed", **result}
    return {**base, "status": "ran", "predicted_seconds": predicted, **result}


def load_cells(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_cell(cells: dict, key: str, value: dict, path: Path) -> None:
    """Record one finished cell; merges with the file under a lock, so runs over different
    models or methods can share the cache concurrently."""
    cells[key] = value
    lock_path = Path(tempfile.gettempdir()) / f"paper-cells-{zlib.crc32(bytes(path.resolve())):08x}"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_json("paper_cells", {**load_cells(path), key: value}, str(path))


def model_results(name: str, grid: list[int], args: Any, cells: dict) -> dict:
    """Every method's cells for one model, from the cache or freshly run."""
    rows = simulate(name, max(grid), args.seed)
    model = build(name)
    path = args.results / "paper_cells.json"
    out: dict[str, Any] = {}
    for method in [m for m in ONLINE if m in args.methods]:
        key = f"{name}/{method}/{args.seed}"
        cached = cells.get(key, {})
        if not any(p["n"] == max(grid) for p in cached.get("points", [])):
            if (method == "exact" and name != "linear") or args.cached_only:
                if cached:
                    out[method] = cached
                continue
            print(f"{name}: {method} one pass to N = {max(grid):,}", flush=True)
            try:
                result = run_online(
                    model, method, rows, grid, args, lambda c, k=key: save_cell(cells, k, c, path)
                )
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            save_cell(cells, key, result, path)
        out[method] = cells[key]
    references = [m for m in REFERENCES if m in args.methods]
    # Finished cells below the grid (from earlier runs) feed the time fits too.
    cached_cells = load_cells(path)
    done: dict[str, list[dict]] = {
        m: sorted(
            (cell for key, cell in cached_cells.items()
             if key.startswith(f"{name}/{m}/{args.seed}/") and key.endswith(f"/{args.live_points}")
             and cell["status"] == "ran" and cell["n"] < min(grid)),
            key=lambda cell: cell["n"],
        )
        for m in references
    }
    points: dict[str, list[dict]] = {m: [] for m in references}
    for n in grid:  # every method at small N first: the fits for larger N need them
        for method in references:
            key = f"{name}/{method}/{args.seed}/{n}/{args.live_points}"
            cell = load_cells(path).get(key)  # other runs' cells
            rerun = cell is not None and cell["status"] in ("extrapolated", "failed")
            if args.cached_only and cell is None:
                continue
            if not args.cached_only and (
                cell is None or (rerun and cell.get("seconds", 0.0) < args.budget_s)
            ):
                print(f"{name}: {method} at N = {n:,}", flush=True)
                cell = reference_cell(name, method, rows, n, done[method], args)
                save_cell(cells, key, cell, path)
            if cell["status"] == "ran":
                done[method].append(cell)
            points[method].append(cell)
    out.update({method: {"points": points[method]} for method in references})
    return out


def point_at(result: dict, n: int) -> dict | None:
    return next((p for p in result.get("points", []) if p["n"] == n), None)


def best_reference(results: dict, n: int, name: str) -> tuple[str, dict] | None:
    """The exact value (linear regression), else the finished reference with the smallest
    stderr (importance sampling only with Pareto k̂ below the limit)."""
    if name == "linear" and point_at(results.get("exact", {}), n):
        return "exact", point_at(results["exact"], n)
    ran = [
        (method, cell)
        for method in REFERENCES
        if method in results
        and (cell := point_at(results[method], n) or {}).get("status") == "ran"
        and cell.get("pareto_k", 0.0) < PARETO_K_LIMIT
    ]
    return min(ran, key=lambda pair: pair[1]["stderr"]) if ran else None


def sgais_seconds(sgais: dict, n: int) -> tuple[float, str] | None:
    """SG-AIS's seconds to N: measured, or — for a pass stopped before N — its last measured
    time plus (N − n₁) at the rate per row between its last two grid points n₀ < n₁ (SG-AIS's
    cost per row does not grow with n: benchmarks/throughput.py)."""
    points = sgais.get("points", [])
    if point_at(sgais, n) is not None:
        return point_at(sgais, n)["seconds"], "ran"
    if len(points) < 2:
        return None
    first, second = points[-2], points[-1]
    rate = (second["seconds"] - first["seconds"]) / (second["n"] - first["n"])
    return second["seconds"] + rate * (n - second["n"]), "extrapolated"


def verdicts(name: str, results: dict, grid: list[int]) -> dict:
    """Agreement at N = 1e5, 1e6; speed at the largest N; references against exact (linear)."""
    out: dict[str, Any] = {"agreement": [], "speed": None, "references_vs_exact": []}
    sgais = results.get("sgais", {})
    for n in [n for n in grid if n >= 100_000]:
        mine, reference = point_at(sgais, n), best_reference(results, n, name)
        if mine is None or reference is None:
            out["agreement"].append({"n": n, "checked": False, "reason": "no reference run at N"})
            continue
        method, ref = reference
        difference = mine["log_z"] - ref["log_z"]
        combined = 2.0 * math.hypot(mine["stderr"], ref["stderr"])
        tolerance = max(AGREEMENT_PER_ROW * n, combined)
        out["agreement"].append(
            {
                "n": n,
                "checked": True,
                "reference": method,
                "difference": difference,
                "tolerance": tolerance,
                "two_combined_stderr": combined,
                "pass": abs(difference) <= tolerance,
            }
        )
    last, mine = max(grid), sgais_seconds(sgais, max(grid))
    for method in REFERENCES:
        ref = point_at(results.get(method, {}), last)
        if mine is not None and ref is not None and ref.get("seconds"):
            out.setdefault("speedups", {})[method] = {
                "n": last,
                "ratio": ref["seconds"] / mine[0],
                "status": "killed (lower bound)" if killed(ref) else ref["status"],
                "sgais_status": mine[1],
            }
    if "nested" in out.get("speedups", {}):
        out["speed"] = {
            **out["speedups"]["nested"],
            "target": SPEED_TARGET,
            "pass": out["speedups"]["nested"]["ratio"] >= SPEED_TARGET,
        }
    for cell in results.get("nested", {}).get("points", []):
        other = point_at(results.get("dynesty", {}), cell["n"])
        if cell.get("status") == "ran" and other is not None and other.get("status") == "ran":
            combined = math.hypot(cell["stderr"], other["stderr"])
            difference = cell["log_z"] - other["log_z"]
            out.setdefault("nested_vs_dynesty", []).append(
                {
                    "n": cell["n"],
                    "difference": difference,
                    "combined_stderr": combined,
                    "pass": abs(difference) <= 2.0 * combined,
                }
            )
    if name == "linear":
        for method in REFERENCES:
            for cell in results.get(method, {}).get("points", []):
                exact = point_at(results.get("exact", {}), cell["n"])
                if cell.get("status") == "ran" and exact is not None:
                    z = (cell["log_z"] - exact["log_z"]) / max(cell["stderr"], 1e-12)
                    out["references_vs_exact"].append(
                        {
                            "method": method,
                            "n": cell["n"],
                            "difference": cell["log_z"] - exact["log_z"],
                            "stderr": cell["stderr"],
                            "z": z,
                            "pass": abs(z) <= 2.0,
                        }
                    )
    return out


def killed(cell: dict) -> bool:
    """A cell stopped at the wall limit whose time is only the CPU it had used (a lower bound)."""
    return cell.get("seconds") == cell.get("cpu_seconds_when_killed", math.nan)


def plot(name: str, results: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (method, result) in enumerate(results.items()):
        points = [p for p in result.get("points", []) if p.get("seconds")]
        ran = [p for p in points if "log_z" in p]
        offset = 1.0 + 0.04 * (i - len(results) / 2)  # spread the markers to keep bars readable
        if ran:
            left.errorbar(  # colours C0, C1, ... in method order, shared with the inset
                [p["n"] * offset for p in ran],
                [p["log_z"] / p["n"] for p in ran],
                yerr=[2 * p["stderr"] / p["n"] for p in ran],
                marker="o",
                ms=3,
                capsize=2,
                label=method,
                color=f"C{i}",
            )
        measured = [p for p in points if p.get("status", "ran") == "ran"]
        right.plot(
            [p["n"] for p in measured],
            [p["seconds"] for p in measured],
            marker="o",
            ms=3,
            label=method,
            color=f"C{i}",
        )
        for marker, status in (("x", "extrapolated"), ("^", "killed")):
            guessed = [
                p
                for p in points
                if p.get("status") == "extrapolated" and killed(p) == (status == "killed")
            ]
            right.plot(
                [p["n"] for p in guessed],
                [p["seconds"] for p in guessed],
                ls="none",
                marker=marker,
                color=f"C{i}",
            )
    inset = left.inset_axes((0.45, 0.08, 0.52, 0.42))
    for i, (method, result) in enumerate(results.items()):
        pairs = [
            (p, best_reference(results, p["n"], name))
            for p in result.get("points", [])
            if "log_z" in p
        ]
        pairs = [(p, ref) for p, ref in pairs if ref is not None and ref[0] != method]
        if pairs:
            inset.errorbar(
                [p["n"] * (1.0 + 0.04 * (i - len(results) / 2)) for p, _ in pairs],
                [p["log_z"] - ref[1]["log_z"] for p, ref in pairs],
                yerr=[2 * p["stderr"] for p, _ in pairs],
                marker="o",
                ms=2,
                capsize=1.5,
                lw=0.8,
                color=f"C{i}",
            )
    inset.axhline(0.0, color="black", lw=0.6)
    inset.set_xscale("log")
    inset.set_yscale("symlog", linthresh=1.0)
    inset.tick_params(labelsize=7)
    inset.set_title("log Z − reference (nats, ±2 stderr)", fontsize=7)
    left.set(xscale="log", xlabel="N", ylabel="log Z / N  (±2 stderr / N)", title=name)
    right.set(
        xscale="log",
        yscale="log",
        xlabel="N",
        ylabel="CPU s, 1 thread (x: extrapolated, ^: killed, ≥)",
        title=f"{name}: runtime (online: one cumulative pass)",
    )
    right.legend(fontsize=8)  # colours are shared by both panels and the inset
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return str(path)


def print_model(name: str, results: dict, grid: list[int], checks: dict) -> None:
    rows = []
    for n in grid:
        row: list[Any] = [n]
        for method in results:
            p = point_at(results[method], n)
            if p is None:
                row.append("—")
            elif "log_z" in p:
                row.append(f"{p['log_z'] / n:.5f} ± {p['stderr'] / n:.1e} ({p['seconds']:.3g} s)")
            elif killed(p):
                row.append(f"killed (≥ {p['seconds']:.3g} s)")
            else:
                row.append(f"{p.get('status', '?')} ({p.get('seconds', math.nan):.3g} s)")
        rows.append(row)
    print(f"\n{name}: log Z / N ± stderr / N (CPU seconds)")
    print(table(["N", *results], rows))
    for a in checks["agreement"]:
        if a["checked"]:
            print(
                f"  agreement N={a['n']:,}: sgais − {a['reference']} = {a['difference']:.3f} "
                f"(tolerance {a['tolerance']:.3f}): {verdict(a['pass'])}"
            )
        else:
            print(f"  agreement N={a['n']:,}: not checked ({a['reason']})")
    for method, s in checks.get("speedups", {}).items():
        print(
            f"  speed N={s['n']:,}: {method} / sgais = {s['ratio']:.1f}× ({method} {s['status']}, "
            f"sgais {s['sgais_status']})"
        )
    for r in checks.get("nested_vs_dynesty", []):
        print(
            f"  nested − dynesty N={r['n']:,}: {r['difference']:.3f} ± {r['combined_stderr']:.3f}"
            f": {verdict(r['pass'])}"
        )
    for r in checks["references_vs_exact"]:
        print(
            f"  {r['method']} N={r['n']:,}: − exact = {r['difference']:.3f} ± {r['stderr']:.3f} "
            f"(z = {r['z']:.2f}): {verdict(r['pass'])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["linear", "logistic", "mixture"])
    parser.add_argument("--methods", nargs="+", default=[*ONLINE, *REFERENCES])
    parser.add_argument("--min-n", type=float, default=1e2)
    parser.add_argument("--max-n", type=float, default=1e6)
    parser.add_argument("--per-decade", type=int, default=1, help="grid points per decade")
    parser.add_argument("--budget-s", type=float, default=900.0, help="CPU s per reference cell")
    parser.add_argument(
        "--wall-factor", type=float, default=4.0, help="kill a cell after this × budget wall s"
    )
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--live-points", type=int, default=100)
    parser.add_argument("--post", type=int, default=500, help="rows per online chunk")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS, help="output folder")
    parser.add_argument("--cached-only", action="store_true", help="assemble cached cells only")
    parser.add_argument("--quick", action="store_true", help="N = 1e2..1e4, 120 s budgets")
    args = parser.parse_args()
    if args.quick:
        args.max_n, args.budget_s = min(args.max_n, 1e4), min(args.budget_s, 120.0)
    set_threads(args.threads)
    decades = round(math.log10(args.max_n / args.min_n) * args.per_decade)
    grid = sorted({round(args.min_n * 10 ** (i / args.per_decade)) for i in range(decades + 1)})
    cells = load_cells(args.results / "paper_cells.json")
    for name in args.models:
        results = model_results(name, grid, args, cells)
        checks = verdicts(name, results, grid)
        print_model(name, results, grid, checks)
        png = f"paper_{name}.png"
        figure = plot(name, results, result_path(args.results / png, png))
        payload = {
            "benchmark": "paper",
            "model": name,
            "config": build(name).config(),
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "grid": grid,
            "environment": environment(args.threads),
            "results": results,
            "verdicts": checks,
            "plot": figure,
            "extrapolation": "T(N) = (a + b·ln N) · t(N): evaluations fitted over completed "
            "smaller-N runs, t(N) = measured seconds per per-particle full-data evaluation",
        }
        written = write_json(f"paper_{name}", payload, str(args.results / f"paper_{name}.json"))
        print(f"wrote {written}" + (f" and {figure}" if figure else ""))


if __name__ == "__main__":
    main()
