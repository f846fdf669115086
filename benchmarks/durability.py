"""What ``appendfsync everysec`` can lose, against ``always``: acknowledged writes, measured.

Writers append ~1 KiB entries to a Redis stream (XADD, like an ingested chunk) from several
threads and record each acknowledgement. Two experiments per fsync policy:

1. Process crash: SIGKILL redis-server mid-stream, restart it from its append-only file, and
   count acknowledged entries that are missing (``--trials`` times).
2. Machine crash (power loss, kernel panic): only fsynced bytes survive, and a killed process
   cannot show that, so redis-server runs under strace, which timestamps every write() to the
   AOF and every fdatasync(). An acknowledged entry is durable once an fdatasync that started
   after the AOF write carrying it has returned (Redis writes the AOF before it replies); until
   then a machine crash loses it. Reported: how long acknowledged entries stay exposed
   (p50/p99/max) and how many are exposed at once (mean/max over the run). strace slows Redis
   down, so the rate under strace is reported too; exposure in entries scales with the rate.
   Automatic AOF rewrites are off in this run, so the AOF keeps its file descriptor.

Experiment 1 also counts Redis's "Asynchronous AOF fsync is taking too long" warnings: with
``everysec``, while a background fsync is slow Redis postpones writing its AOF buffer (up to 2 s)
but still replies, so even a process crash can lose acknowledged writes then.

Prints the figures and writes benchmarks/results/durability.json. ``--quick``: shorter runs.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import redis
from _common import write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "faults"))
from fault_processes import REDIS_SERVER, RedisServer  # noqa: E402

POLICIES = ("always", "everysec")
PAYLOAD = os.urandom(1024)


class Writers:
    """``threads`` clients appending numbered entries; ``acked`` maps entry -> ack time."""

    def __init__(self, url: str, threads: int) -> None:
        self.url = url
        self.threads = threads
        self.acked: dict[int, float] = {}
        self._stop = threading.Event()
        self._counter = iter(range(10**12))
        self._lock = threading.Lock()
        self._running: list[threading.Thread] = []

    def _write(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=5)
        while not self._stop.is_set():
            with self._lock:
                number = next(self._counter)
            try:
                client.xadd("durability", {"n": number, "block": PAYLOAD})
            except (redis.ConnectionError, redis.TimeoutError):
                return  # the server was killed: this entry was never acknowledged
            self.acked[number] = time.time()

    def start(self) -> None:
        self._running = [threading.Thread(target=self._write) for _ in range(self.threads)]
        for thread in self._running:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._running:
            thread.join()


def stored_entries(url: str) -> set[int]:
    client = redis.Redis.from_url(url)
    return {int(fields[b"n"]) for _, fields in client.xrange("durability")}


def process_crash(policy: str, trials: int, seconds: float, threads: int) -> dict[str, Any]:
    """SIGKILL redis-server while writers run; count acknowledged entries lost on restart."""
    lost, acknowledged, rates, slow_fsyncs = [], [], [], []
    logs_of_losses: list[list[str]] = []  # redis-server's warnings in trials that lost writes
    rng = random.Random(0)
    for trial in range(trials):
        with tempfile.TemporaryDirectory() as tmp:
            server = RedisServer(Path(tmp), appendfsync=policy)
            server.start()
            writers = Writers(server.url, threads)
            started = time.time()
            writers.start()
            time.sleep(seconds * rng.uniform(0.5, 1.0))
            server.kill()
            elapsed = time.time() - started
            writers.stop()
            server.start()
            survived = stored_entries(server.url)
            server.kill()
            log = (Path(tmp) / "redis.log").read_text()
            slow_fsyncs.append(log.count("fsync is taking too long"))
        lost.append(len(set(writers.acked) - survived))
        if lost[-1]:
            logs_of_losses.append([line for line in log.splitlines() if " # " in line])
        acknowledged.append(len(writers.acked))
        rates.append(len(writers.acked) / elapsed)
        print(f"  {policy:8s} kill {trial + 1}: acknowledged {acknowledged[-1]}, "
              f"lost {lost[-1]}, slow-fsync warnings {slow_fsyncs[-1]}")
    return {"trials": trials, "acknowledged": acknowledged, "lost_acknowledged": lost,
            "slow_fsync_warnings": slow_fsyncs, "acks_per_s_mean": float(np.mean(rates)),
            "redis_warnings_in_trials_that_lost": logs_of_losses}


_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(?:<\.\.\. )?(write|fdatasync|fsync)\(?(\d+)?"
                   r".*<(\d+\.\d+)>$")


def traced_syscalls(trace: Path, aof_fds: set[int]) -> tuple[list[float], list[tuple]]:
    """(end times of AOF writes, (start, end) of fsyncs) from ``strace -f -ttt -T`` output.
    An fsync of the AOF still running when the trace ends gets end = inf."""
    writes, syncs = [], []
    unfinished: dict[str, int] = {}  # pid -> fd of a write() strace printed as unfinished
    unfinished_sync: dict[str, tuple[int, float]] = {}  # pid -> (fd, start) of an fsync
    for line in trace.read_text().splitlines():
        if line.endswith("<unfinished ...>"):
            found = re.match(r"^(\d+)\s+(\S+)\s+(write|fdatasync|fsync)\((\d+)", line)
            if found and found[3] == "write":
                unfinished[found[1]] = int(found[4])
            elif found:
                unfinished_sync[found[1]] = (int(found[4]), float(found[2]))
            continue
        match = _LINE.match(line)
        if not match:
            continue
        pid, stamp, call, fd, duration = match.groups()
        resumed = "resumed>" in line
        end = float(stamp) if resumed else float(stamp) + float(duration)
        if call == "write":
            number = unfinished.pop(pid, None) if resumed else int(fd)
            if number in aof_fds:
                writes.append(end)
        elif int(fd or unfinished_sync.pop(pid, (-1, 0.0))[0]) in aof_fds:
            syncs.append((end - float(duration), end))
    syncs += [(start, float("inf")) for fd, start in unfinished_sync.values() if fd in aof_fds]
    return sorted(writes), sorted(syncs)


def machine_crash_exposure(policy: str, seconds: float, threads: int) -> dict[str, Any]:
    """How long each acknowledged entry waits for an fsync: what a power cut would lose."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "strace.txt"
        server = RedisServer(Path(tmp) / "redis", appendfsync=policy,
                             wrapper=("strace", "-f", "-ttt", "-T", "-o", str(trace),
                                      "-e", "trace=write,fdatasync,fsync"),
                             options=("--auto-aof-rewrite-percentage", "0"))
        server.start()
        assert server.process is not None
        (redis_process,) = psutil.Process(server.process.pid).children()
        writers = Writers(server.url, threads)
        writers.start()
        time.sleep(seconds)
        # Read while writing: Redis 7 opens its incremental AOF once the first rewrite is done.
        aof_fds = {int(link.name) for link in Path(f"/proc/{redis_process.pid}/fd").iterdir()
                   if os.readlink(link).endswith(".aof")}
        writers.stop()
        redis.Redis.from_url(server.url).shutdown(nosave=True)
        server.process.wait(30)
        writes, syncs = traced_syscalls(trace, aof_fds)
    sync_starts = [start for start, _ in syncs]
    acks = np.sort(np.fromiter(writers.acked.values(), float))
    durable_at = np.full(len(acks), np.inf)
    for index, ack in enumerate(acks):
        carrier = bisect.bisect_right(writes, ack) - 1  # the last AOF write before the reply
        first_sync = bisect.bisect_left(sync_starts, writes[carrier]) if carrier >= 0 else 0
        if first_sync < len(syncs):
            durable_at[index] = syncs[first_sync][1]
    exposed = np.maximum(durable_at - acks, 0.0)
    finite = exposed[np.isfinite(exposed)]
    grid = np.arange(acks[0] + 1.0, acks[-1], 0.01)  # crash instants, after a 1 s warm-up
    at_risk = [int(np.sum((acks <= t) & (durable_at > t))) for t in grid]
    return {
        "acks_per_s_under_strace": len(acks) / (acks[-1] - acks[0]),
        "fsyncs": len(syncs),
        "fsync_seconds": {"p50": float(np.median([e - b for b, e in syncs])),
                          "max_finished": max(e - b for b, e in syncs if np.isfinite(e))},
        "fsync_still_running_at_end_since_s": max(
            (acks[-1] - b for b, e in syncs if not np.isfinite(e)), default=0.0),
        "longest_gap_between_fsyncs_s": max(
            (b - e for (_, e), (b, _) in itertools.pairwise(syncs) if np.isfinite(e)),
            default=0.0),
        "exposure_s": {"p50": float(np.percentile(finite, 50)),
                       "p99": float(np.percentile(finite, 99)), "max": float(finite.max())},
        "never_fsynced_before_shutdown": int(np.sum(~np.isfinite(exposed))),
        "exposed_entries": {"mean": float(np.mean(at_risk)), "max": int(np.max(at_risk))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5, help="SIGKILLs per policy")
    parser.add_argument("--seconds", type=float, default=4.0, help="writing per trial")
    parser.add_argument("--threads", type=int, default=4, help="concurrent writers")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON path (default results/durability.json)")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.seconds = 2, 2.0
    version = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True)
    results: dict[str, Any] = {"setup": {k: v for k, v in vars(args).items() if k != "output"},
                               "redis_server": version.stdout.strip()}
    for policy in POLICIES:
        crash = process_crash(policy, args.trials, args.seconds, args.threads)
        exposure = machine_crash_exposure(policy, 3 * args.seconds, args.threads)
        results[policy] = {"process_crash": crash, "machine_crash": exposure}
    args.output = write_json("durability", results, args.output)
    print(f"{'policy':9s} {'acks/s':>8s} {'lost on SIGKILL':>16s} {'exposure p50/p99/max (s)':>26s}"
          f" {'exposed acks mean/max':>22s}")
    for policy in POLICIES:
        crash, exposure = results[policy]["process_crash"], results[policy]["machine_crash"]
        times = exposure["exposure_s"]
        print(f"{policy:9s} {crash['acks_per_s_mean']:8.0f} "
              f"{sum(crash['lost_acknowledged']):>6d} of {sum(crash['acknowledged']):<7d} "
              f"{times['p50']:8.3f} {times['p99']:7.3f} {times['max']:7.3f}   "
              f"{exposure['exposed_entries']['mean']:9.1f} {exposure['exposed_entries']['max']:6d}"
              f"  ({exposure['acks_per_s_under_strace']:.0f} acks/s under strace)")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
