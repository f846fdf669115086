"""A comparison's models in parallel across workers: 8 softmax-regression models (10 inputs,
4 classes, each on its own subset of the columns), SG-AIS with the service defaults.

After the first 2,000 rows (4 chunks, untimed), 40 chunks of 500 rows are posted at once and
timed until the last is applied: end-to-end rows/s of the service (redis-server with AOF,
``appendfsync always``; the API; ``modelcompare worker`` processes) with 1 and 2 workers, against
the library's rate for the same 8 models run back to back on the same chunks in one process.
States of the service runs are checked bit-identical to the library's.

The 2 cores are shared (the API, redis-server, the benchmark itself, and jobs outside it), so
each run also records the CPU seconds its own processes used and what every other process on the
machine used meanwhile (``/proc/stat``): a run that others slowed down shows it. The runs repeat
``--repeats`` times, interleaved, and the rates quoted are the medians. With ``--baseline`` (a git
ref, default ``main``) the workers of that code run the same trials in the same run. Prints the
rates and ratios; writes benchmarks/results/parallel.json. ``--quick``: 10 timed chunks, one
repeat, no baseline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
from _common import (
    QUICK,
    checkout,
    environment,
    logistic_data,
    set_threads,
    table,
    verdict,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

from modelcompare.estimators import state_to_bytes  # noqa: E402
from modelcompare.service.core.config import Settings  # noqa: E402
from modelcompare.service.engine import runner_for  # noqa: E402
from modelcompare.service.schemas import ComparisonIn, comparison_spec  # noqa: E402
from modelcompare.service.store.codec import decode_block, encode_block  # noqa: E402
from modelcompare.service.store.history import BlockHistory  # noqa: E402
from modelcompare.service.store.keys import Keys  # noqa: E402

INPUTS, CLASSES, CHUNK, WARM_CHUNKS = 10, 4, 500, 4
COLUMNS = [list(range(10)), list(range(8)), list(range(2, 10)), [0, 2, 4, 6, 8],
           [1, 3, 5, 7, 9], list(range(6)), [0, 1, 2, 7, 8, 9], [3, 4, 5, 6]]
SPEC = {"name": "parallel", "seed": 0, "x_dim": INPUTS, "estimator": {"method": "sgais"},
        "models": [{"name": f"m{i}", "family": "logistic_regression",
                    "config": {"dim": len(columns), "classes": CLASSES}, "columns": columns}
                   for i, columns in enumerate(COLUMNS)]}


def chunks(timed: int) -> list[dict[str, Any]]:
    x, y = logistic_data((WARM_CHUNKS + timed) * CHUNK, seed=0, inputs=INPUTS, classes=CLASSES)
    return [{"x": x[i : i + CHUNK].tolist(), "y": y[i : i + CHUNK].tolist()}
            for i in range(0, len(y), CHUNK)]


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``)."""
    busy = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]  # all but idle, iowait
    return (sum(int(v) for v in busy) - sum(int(v) for v in busy[3:5])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of named processes between ``start`` and ``stop``, and of all the others."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self._before = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = machine_cpu_seconds()

    def stop(self) -> dict[str, float]:
        self.used = {name: process_cpu_seconds(pid) - self._before[name]
                     for name, pid in self.pids.items()}
        self.used["other_processes"] = (machine_cpu_seconds() - self._machine
                                        - sum(self.used.values()))
        return self.used


def library(data: list[dict[str, Any]]) -> tuple[float, dict[str, bytes], dict[str, float]]:
    """Seconds for the timed chunks, every model in turn, the final states and CPU seconds."""
    spec = comparison_spec(ComparisonIn.model_validate(SPEC), "library", 0.0,
                           Settings().limits)
    runners = [runner_for(spec, model) for model in spec.models]
    states = {r.name: r.init_state() for r in runners}
    history = BlockHistory(INPUTS, True)
    started, meter = 0.0, CpuMeter({"library": os.getpid()})
    for sequence, chunk in enumerate(data, start=1):
        if sequence == WARM_CHUNKS + 1:
            meter.start()
            started = time.perf_counter()
        rows = decode_block(encode_block(np.array(chunk["x"]), np.array(chunk["y"])))
        for runner in runners:
            states[runner.name], _ = runner.update(states[runner.name], rows,
                                                   history.prefix(sequence - 1), sequence)
        history.append(rows)
    seconds = time.perf_counter() - started
    return seconds, {n: state_to_bytes(s) for n, s in states.items()}, meter.stop()


def helped_updates(metrics_port: int) -> float:
    """Model updates a worker computed for chunks another worker applied (its metrics)."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/", timeout=10).text
    line = next(line for line in text.splitlines()
                if line.startswith("modelcompare_model_updates_helped_total"))
    return float(line.split()[-1])


def service(data: list[dict[str, Any]], workers: int, workdir: Path,
            worker_root: Path) -> dict[str, Any]:
    deployment = Deployment(workdir, workers=workers, root=worker_root)
    deployment.start()
    try:
        store = redis.Redis.from_url(deployment.redis.url)
        pids = {"redis": deployment.redis.process, "api": deployment.api.process,
                **{f"worker_{i}": w.process for i, w in enumerate(deployment.workers)}}
        meter = CpuMeter({"benchmark": os.getpid(),
                          **{name: p.pid for name, p in pids.items() if p is not None}})
        with httpx.Client(base_url=deployment.api.url, timeout=60) as client:
            cid = client.post("/v1/comparisons", json=SPEC).json()["id"]
            keys = Keys(deployment.prefix, cid)

            def send_and_wait(part: list[dict[str, Any]], through: int) -> None:
                for chunk in part:
                    assert client.post(f"/v1/comparisons/{cid}/chunks",
                                       json=chunk).status_code == 202
                while True:
                    sequence, halted = store.hmget(keys.meta, "sequence", "halted")
                    if int(sequence) >= through:
                        return
                    if halted:  # e.g. an update ran past the budget on an overloaded machine
                        raise RuntimeError(f"chunk {int(halted)} dead-lettered: see the log")
                    time.sleep(0.02)  # polling takes CPU from the 2 cores it measures

            send_and_wait(data[:WARM_CHUNKS], WARM_CHUNKS)
            meter.start()
            started = time.perf_counter()
            send_and_wait(data[WARM_CHUNKS:], len(data))
            seconds = time.perf_counter() - started
            meter.stop()
        helped = [helped_updates(worker.metrics_port) for worker in deployment.workers]
        states = {k.decode(): v for k, v in store.hgetall(keys.states).items()}
    finally:
        deployment.stop()
    return {"seconds": seconds, "states": states, "helped_updates_per_worker": helped,
            "cpu_seconds": meter.used}


def merge_base() -> str:
    """Main as this branch left it: the same estimators, so the same states."""
    return subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                          capture_output=True, text=True).stdout.strip()


def trial_line(name: str, trial: dict[str, Any], rows: int) -> str:
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in trial["cpu_seconds"].items())
    rate = rows / trial["seconds"]
    return f"  {name}: {rate:,.0f} rows/s ({trial['seconds']:.1f} s; CPU seconds: {cpu})"


def summary(trials: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """The median rate of a run's trials, the cores other processes kept busy meanwhile (of 2),
    and every trial less its states."""
    rates = [rows / t["seconds"] for t in trials]
    others = [t["cpu_seconds"]["other_processes"] / t["seconds"] for t in trials]
    return {"rows_per_s": statistics.median(rates), "rows_per_s_trials": rates,
            "other_processes_cores_trials": others,
            "trials": [{k: v for k, v in t.items() if k != "states"} for t in trials]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10 if QUICK else 40)
    parser.add_argument("--repeats", type=int, default=1 if QUICK else 2)
    parser.add_argument("--baseline", default=None if QUICK else merge_base(),
                        help="git ref whose workers run the same trials (default: main where "
                             "this branch left it; none under --quick)")
    parser.add_argument("--quick", action="store_true", help="a smoke run into results/quick/")
    args = parser.parse_args()
    set_threads(1)
    data = chunks(args.chunks)
    rows = args.chunks * CHUNK
    trials: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"": ROOT}
        if args.baseline:
            roots["baseline_"] = checkout(args.baseline, Path(tmp) / "baseline-code")
        for repeat in range(args.repeats):
            print(f"repeat {repeat + 1} of {args.repeats}, load average {os.getloadavg()}")
            seconds, reference, cpu = library(data)
            trials.setdefault("library", []).append({"seconds": seconds, "cpu_seconds": cpu})
            print(trial_line("library", trials["library"][-1], rows))
            for label, root in roots.items():
                for workers in (1, 2):
                    name = f"{label}{workers}_workers"
                    trial = service(data, workers, Path(tmp) / f"{repeat}-{name}", root)
                    trial["bit_identical"] = trial["states"] == reference
                    trials.setdefault(name, []).append(trial)
                    print(trial_line(name, trial, rows) + f"; bit-identical "
                          f"{trial['bit_identical']}; helped {trial['helped_updates_per_worker']}")
    runs = {name: summary(run, rows) for name, run in trials.items()}
    library_rate = runs["library"]["rows_per_s"]
    ratios = {}
    for label in roots:
        one, two = runs[f"{label}1_workers"]["rows_per_s"], runs[f"{label}2_workers"]["rows_per_s"]
        ratios[f"{label}one_worker_over_library"] = one / library_rate
        ratios[f"{label}two_workers_over_one"] = two / one
        # each repeat's own ratio: its runs ran minutes apart, under much the same outside load
        ratios[f"{label}two_workers_over_one_per_repeat"] = [
            a["seconds"] / b["seconds"]
            for a, b in zip(trials[f"{label}1_workers"], trials[f"{label}2_workers"], strict=True)]
    print(table(["run", "median rows/s", "trials (rows/s)", "cores other processes used"],
                [[name, run["rows_per_s"], " ".join(f"{r:,.0f}" for r in run["rows_per_s_trials"]),
                  " ".join(f"{c:.2f}" for c in run["other_processes_cores_trials"])]
                 for name, run in runs.items()]))
    targets = {"two_workers_ge_1.7x_one": ratios["two_workers_over_one"] >= 1.7,
               "one_worker_ge_0.9x_library": ratios["one_worker_over_library"] >= 0.9,
               # the baseline's estimators may differ: its states are only recorded
               "bit_identical": all(t.get("bit_identical", True) for name, run in trials.items()
                                    if not name.startswith("baseline_")
                                    for t in run)}
    for key, value in ratios.items():
        print(f"{key}: {value}")
    for key, ok in targets.items():
        print(f"{key}: {verdict(ok)}")
    path = write_json("parallel", {"environment": environment(1), "arguments": vars(args),
                                   "spec": SPEC, "rows_timed": rows, "runs": runs,
                                   "ratios": ratios, "targets": targets})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
