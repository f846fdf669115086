"""A cooperative compute budget for one update: a point on a monotonic clock.

Updates check it between annealing steps and between the transitions of a move, and raise
``BudgetExceeded`` (naming how far they got) once it has passed; the input state is untouched,
so the caller can retry, give the update more time, or drop the chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from estimators.errors import BudgetExceeded, Progress

Checkpoint = Callable[[], None]  # raises ``BudgetExceeded`` once the deadline has passed


@dataclass(frozen=True)
class Deadline:
    at: float  # on ``clock``'s scale
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    @classmethod
    def cpu_after(cls, seconds: float) -> Deadline:
        """``seconds`` of the calling thread's CPU time from now: a budget that other work on a
        busy host does not use up (check it on the thread that made it)."""
        return cls.after(seconds, time.thread_time)

    def passed(self) -> bool:
        return self.clock() >= self.at


def check_deadline(deadline: Deadline | None, progress: Progress) -> None:
    if deadline is not None and deadline.passed():
        raise BudgetExceeded(progress)
