"""benchmarks/parallel.py's CPU meter: what tells a run that other processes on the machine
slowed down from a slow run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import parallel  # noqa: E402

TICK = 1 / os.sysconf("SC_CLK_TCK")


def test_the_meter_counts_this_process_and_leaves_the_rest_to_others() -> None:
    meter = parallel.CpuMeter({"test": os.getpid()})
    meter.start()
    started = time.process_time()
    while time.process_time() - started < 0.3:
        pass
    used = meter.stop()
    spent = time.process_time() - started
    assert abs(used["test"] - spent) <= 3 * TICK  # /proc counts whole clock ticks
    assert used["other_processes"] >= -3 * TICK

