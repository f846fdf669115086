"""A cooperative compute budget for one update: a point on a monotonic clock.

Updates check it between annealing steps and between the transitions of a move, and raise
``BudgetExceeded`` (naming how far they got) once it has passed; the input state is untouched,
so the caller can retry, give the update more time, or drop the chunk.

A caller may also set a *cutoff*, an earlier point past which it abandons the update
(``CutOff``): the budget, which steps may share out (a re-estimate gets half of what is left),
stays what it is, so an update that ends before the cutoff is the one it would have been
without it, bit for bit (the service's express lane: service/lanes.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from modelcompare.estimators.errors import BudgetExceeded, CutOff, Progress

Checkpoint = Callable[[], None]  # raises ``BudgetExceeded`` once the deadline has passed


@dataclass(frozen=True)
class Deadline:
    at: float  # on ``clock``'s scale
    clock: Callable[[], float] = time.monotonic
    cutoff: float = math.inf  # on ``clock``'s scale

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic,
              cutoff: float = math.inf) -> Deadline:
        """``seconds`` from now, cut off ``cutoff`` seconds from now."""
        now = clock()
        return cls(now + seconds, clock, now + cutoff)

    @classmethod
    def cpu_after(cls, seconds: float, cutoff: float = math.inf) -> Deadline:
        """``seconds`` of the calling thread's CPU time from now: a budget that other work on a
        busy host does not use up (check it on the thread that made it)."""
        return cls.after(seconds, time.thread_time, cutoff)

    def passed(self) -> bool:
        return self.clock() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the way to this one from now, with the same cutoff."""
        now = self.clock()
        return Deadline(now + fraction * (self.at - now), self.clock, self.cutoff)


def check_deadline(deadline: Deadline | None, progress: Progress) -> None:
    if deadline is None:
        return
    now = deadline.clock()
    if now >= deadline.cutoff:
        raise CutOff(progress)
    if now >= deadline.at:
        raise BudgetExceeded(progress)
