"""Memory bounded in total, not only per request: the API under concurrent large chunks, and a
worker holding comparisons at their byte limit.

Real processes (tests/faults/fault_processes.py: redis-server, ``modelcompare serve``,
``modelcompare worker``), their RSS sampled with psutil every 10 ms:

(a) API: 8 clients each send one 15 MiB chunk (390 rows of 10,000 numbers) at once to a
    comparison whose model reads 1 of the 10,000 columns. Recorded: the API's peak RSS, its RSS
    2 s after the last answer, and each request's first status (202, or 503 past
    ``max_inflight_bytes``). A client told 503 sends again after ``Retry-After``; how many tries
    and how long until all 8 are stored is recorded too. Target: peak <= 600 MB.
(b) Worker: two comparisons of 10,000 columns whose model reads 1 column, each sent 16 chunks
    of 31 MB (499 MB of its 512 MiB ``max_comparison_bytes``) while no worker runs; then a
    worker starts and applies that backlog; then it is replaced by a fresh one and one more chunk
    goes to each (17 chunks, 530 MB each), so the new worker loads both stored histories (the
    cold start after a restart or a failover). Recorded: each worker's peak RSS. Target: <= 1 GB.

``--baseline REF`` runs the same against the code of a git ref (a ``git archive`` checkout) in
the same run and prints both. Writes benchmarks/results/memory.json; ``--quick``: 4 clients and
3 + 1 chunks per comparison, into results/quick/.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis
from _common import QUICK, checkout, environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from fault_processes import Deployment  # noqa: E402

MB = 1e6
X_DIM = 10_000
ROWS = 390  # 390 rows of 10,000 numbers: a 15 MiB body, a 31 MB block
API_TARGET_MB = 600
WORKER_TARGET_MB = 1000
CLIENTS = 4 if QUICK else 8
FILL_CHUNKS = 3 if QUICK else 16  # per comparison, before the worker is replaced
COMPARISON = {"name": "wide", "x_dim": X_DIM, "estimator": {"method": "sgais", "particles": 32},
              "models": [{"name": "one", "family": "linear_regression", "config": {"dim": 1},
                          "columns": [X_DIM - 1]}]}


def chunk_body() -> bytes:
    row = b"[" + b"0.5," * (X_DIM - 1) + b"0.5]"
    return (b'{"x": [' + b",".join([row] * ROWS) + b'], "y": ['
            + b",".join([b"0.25"] * ROWS) + b"]}")


class Sampler:
    """Peak RSS of some processes, sampled every 10 ms in a thread."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, process in self.processes.items():
                with suppress(psutil.NoSuchProcess):
                    self.peak[name] = max(self.peak[name], process.memory_info().rss)
            time.sleep(0.01)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


@contextmanager
def deployment(root: Path, workdir: Path, workers: int) -> Iterator[Deployment]:
    running = Deployment(workdir, workers=workers, root=root, poll_interval=0.1)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def post_until_stored(client: httpx.Client, path: str, body: bytes,
                      deadline: float) -> tuple[int, int]:
    """(first status, tries): sends again after Retry-After while told 503."""
    first, tries = 0, 0
    while True:
        tries += 1
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        first = first or response.status_code
        if response.status_code != 503 or time.monotonic() > deadline:
            return first, tries
        time.sleep(float(response.headers.get("retry-after", "1")))


def api_scenario(root: Path, workdir: Path) -> dict[str, Any]:
    body = chunk_body()
    with deployment(root, workdir, workers=0) as running, httpx.Client(
            base_url=running.api.url, timeout=300) as client:
        assert running.api.process is not None
        pid = running.api.process.pid
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        path = f"/v1/comparisons/{cid}/chunks"
        idle = rss(pid)
        results: list[tuple[int, int]] = []
        barrier = threading.Barrier(CLIENTS)
        deadline = time.monotonic() + 600

        def send() -> None:
            with httpx.Client(base_url=running.api.url, timeout=300) as own:
                barrier.wait()
                results.append(post_until_stored(own, path, body, deadline))

        started = time.perf_counter()
        with Sampler({"api": pid}) as sampler:
            threads = [threading.Thread(target=send) for _ in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - started
            time.sleep(2)
        after = rss(pid)
        first = [status for status, _ in results]
        stored = client.get(f"/v1/comparisons/{cid}/evidence").json()
        queued = redis.Redis.from_url(running.redis.url).xlen(
            f"{running.prefix}:{{cmp:{cid}}}:stream")
        return {
            "clients": CLIENTS, "body_bytes": len(body),
            "idle_rss_mb": idle / MB, "peak_rss_mb": sampler.peak["api"] / MB,
            "after_rss_mb": after / MB,
            "first_status": {str(s): first.count(s) for s in sorted(set(first))},
            "tries": sum(tries for _, tries in results), "seconds_all_stored": seconds,
            "stream_length": queued, "sequence_applied": stored["sequence"],
            "target_mb": API_TARGET_MB, "pass": sampler.peak["api"] / MB <= API_TARGET_MB,
        }


def wait_applied(client: httpx.Client, cids: list[str], sequence: int, timeout: float) -> float:
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    while any(client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] < sequence
              for cid in cids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"chunks not applied up to {sequence} in {timeout} s")
        time.sleep(0.2)
    return time.perf_counter() - started


def worker_scenario(root: Path, workdir: Path) -> dict[str, Any]:
    body = chunk_body()
    with deployment(root, workdir, workers=1) as running, httpx.Client(
            base_url=running.api.url, timeout=300) as client:
        worker = running.workers[0]
        assert running.api.process is not None
        worker.kill()  # the chunks queue up: the worker finds a backlog, nothing cached
        cids = [client.post("/v1/comparisons", json={**COMPARISON, "name": f"wide-{i}"})
                .json()["id"] for i in range(2)]
        with Sampler({"api": running.api.process.pid}) as filling:
            for _ in range(FILL_CHUNKS):
                for cid in cids:
                    response = client.post(f"/v1/comparisons/{cid}/chunks", content=body,
                                           headers={"content-type": "application/json"})
                    assert response.status_code == 202, response.text
        worker.launch()
        worker.wait_ready()
        assert worker.process is not None
        with Sampler({"worker": worker.process.pid}) as backlog:
            backlog_seconds = wait_applied(client, cids, FILL_CHUNKS, 900)
        worker.kill()  # a fresh worker: nothing cached, both histories to load
        worker.launch()
        worker.wait_ready()
        assert worker.process is not None
        with Sampler({"worker": worker.process.pid}) as cold:
            for cid in cids:
                response = client.post(f"/v1/comparisons/{cid}/chunks", content=body,
                                       headers={"content-type": "application/json"})
                assert response.status_code == 202, response.text
            cold_seconds = wait_applied(client, cids, FILL_CHUNKS + 1, 900)
        redis_mb = redis.Redis.from_url(running.redis.url).info("memory")["used_memory"] / MB
        peak = max(backlog.peak["worker"], cold.peak["worker"]) / MB
        return {
            "chunks_per_comparison": FILL_CHUNKS + 1,
            "stored_bytes_per_comparison": (FILL_CHUNKS + 1) * (9 + ROWS * (X_DIM + 1) * 8),
            "backlog_worker_peak_rss_mb": backlog.peak["worker"] / MB,
            "filling_api_peak_rss_mb": filling.peak["api"] / MB,
            "cold_worker_peak_rss_mb": cold.peak["worker"] / MB,
            "backlog_seconds": backlog_seconds, "cold_apply_seconds": cold_seconds,
            "redis_used_mb": redis_mb,
            "target_mb": WORKER_TARGET_MB, "pass": peak <= WORKER_TARGET_MB,
        }


def run(root: Path, workdir: Path) -> dict[str, Any]:
    print(f"  (a) {CLIENTS} concurrent 15 MiB chunks ...", flush=True)
    api = api_scenario(root, workdir / "api")
    print(f"      API peak {api['peak_rss_mb']:.0f} MB, after {api['after_rss_mb']:.0f} MB, "
          f"first answers {api['first_status']}", flush=True)
    print(f"  (b) two comparisons of {FILL_CHUNKS + 1} x 31 MB blocks ...", flush=True)
    worker = worker_scenario(root, workdir / "worker")
    print(f"      worker peak {worker['backlog_worker_peak_rss_mb']:.0f} MB on the backlog, "
          f"{worker['cold_worker_peak_rss_mb']:.0f} MB cold", flush=True)
    return {"api": api, "worker": worker}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="git ref of the code to compare with")
    parser.add_argument("--quick", action="store_true", help="a smoke run into results/quick/")
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("this checkout:", flush=True)
        runs["current"] = run(ROOT, Path(tmp) / "current")
        if args.baseline:
            print(f"baseline {args.baseline}:", flush=True)
            root = checkout(args.baseline, Path(tmp) / "baseline-code")
            runs["baseline"] = run(root, Path(tmp) / "baseline")
    names = list(runs)
    rows = [
        ["(a) API peak RSS, MB", *(f"{runs[n]['api']['peak_rss_mb']:.0f}" for n in names)],
        ["(a) API RSS 2 s after, MB", *(f"{runs[n]['api']['after_rss_mb']:.0f}" for n in names)],
        ["(a) API idle RSS, MB", *(f"{runs[n]['api']['idle_rss_mb']:.0f}" for n in names)],
        ["(a) first answers", *(" ".join(f"{k}×{v}" for k, v in
                                         runs[n]["api"]["first_status"].items())
                                for n in names)],
        ["(a) tries / s until all stored",
         *(f"{runs[n]['api']['tries']} / {runs[n]['api']['seconds_all_stored']:.1f}"
           for n in names)],
        ["(b) worker peak RSS on the backlog, MB",
         *(f"{runs[n]['worker']['backlog_worker_peak_rss_mb']:.0f}" for n in names)],
        ["(b) fresh worker peak RSS, MB",
         *(f"{runs[n]['worker']['cold_worker_peak_rss_mb']:.0f}" for n in names)],
        ["(b) API peak RSS filling, MB",
         *(f"{runs[n]['worker']['filling_api_peak_rss_mb']:.0f}" for n in names)],
        ["(b) s to apply the backlog",
         *(f"{runs[n]['worker']['backlog_seconds']:.1f}" for n in names)],
        ["(b) fresh worker: s to apply 2 chunks",
         *(f"{runs[n]['worker']['cold_apply_seconds']:.1f}" for n in names)],
    ]
    print(table(["", *(n if n == "current" else f"baseline {args.baseline}" for n in names)],
                rows))
    current = runs["current"]
    print(f"(a) API peak <= {API_TARGET_MB} MB: {verdict(current['api']['pass'])}")
    print(f"(b) worker peak <= {WORKER_TARGET_MB} MB: {verdict(current['worker']['pass'])}")
    write_json("memory", {"environment": environment(1), "baseline": args.baseline,
                          "quick": QUICK, "runs": runs})


if __name__ == "__main__":
    main()
