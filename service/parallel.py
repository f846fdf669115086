"""One chunk's model updates shared out among workers.

The worker holding a comparison's lease (the coordinator) opens one task per model of the chunk
and works through them itself. A worker that finds the lease taken helps: it claims a task of
the open chunk (a claim lapses ``lease_ttl`` after its last renewal, so a dead helper's model is
claimed again), computes the update from the committed state and stages the result in Redis.
The coordinator then commits every model in the one compare-and-set commit, as before: the
chunk becomes visible for all models at once, in order, exactly once. Each update starts from
the committed state before the chunk and draws from a generator seeded by (seed, model,
sequence), so which worker computes it changes no bit. The coordinator stages nothing of its
own: alone, it computes every model in order as a lone worker always did.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

from modelcompare.estimators import BudgetExceeded, CutOff, Deadline, Rows, state_to_bytes
from modelcompare.service.engine import Runner, runner_for
from modelcompare.service.lease import kept
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.history import HistoryCache
from modelcompare.service.store.tasks import Staged, TaskBoard
from modelcompare.service.unavailable import unbuildable


def update_model(runner: Runner, state: Any, rows: Rows, prefix: Any, sequence: int,
                 deadline: Deadline) -> Staged:
    """One model's update of a chunk, or why it failed (it raised, lost finiteness, or ran past
    ``deadline``: ``BudgetExceeded``); ``CutOff`` (the caller abandons it) is raised."""
    try:
        new_state, info = runner.update(state, rows, prefix, sequence, deadline)
        log_z = runner.estimator.log_evidence(new_state)
    except CutOff:
        raise
    except BudgetExceeded as exc:
        return Staged(b"", None, f"model {runner.name!r}: BudgetExceeded: {exc}", over_budget=True)
    except Exception as exc:  # EstimatorError, bad values, or a bug: all retried
        return Staged(b"", None, f"model {runner.name!r}: {type(exc).__name__}: {exc}")
    if not math.isfinite(log_z):
        return Staged(b"", None, f"model {runner.name!r}: log evidence became {log_z}")
    return Staged(state_to_bytes(new_state), runner.reading(new_state, info))


class HeldTask:
    """The model task a worker computes now: one heartbeat for all of a worker's tasks of a
    chunk renews whichever it holds, instead of a thread started per task."""

    def __init__(self, board: TaskBoard, cid: str, ttl: float) -> None:
        self.board, self.cid, self.ttl = board, cid, ttl
        self.current: tuple[int, str] | None = None  # (sequence, model)

    def renew(self) -> bool:
        current = self.current
        if current is not None:
            self.board.renew(self.cid, *current, self.ttl)
        return True  # a claim that lapsed costs work only: keep renewing the next ones


class ModelTasks:
    def __init__(self, board: TaskBoard, cache: HistoryCache, ttl: float, shared: bool,
                 budget: float, spec_of: Callable[[str], ComparisonSpec | None]) -> None:
        self.board = board
        self.spec_of = spec_of  # a comparison's stored spec (None once deleted)
        self.cache = cache
        self.ttl = ttl
        self.shared = shared  # False: a coordinator computes every model itself
        # CPU seconds per chunk for the updates one worker computes (docs/guide/limits.md)
        self.budget = budget

    def update_all(self, cid: str, runners: dict[str, Runner], states: dict[str, bytes],
                   rows: Rows, block: bytes, prefix: Any, sequence: int,
                   cutoff: float = math.inf, alone: bool = False) -> dict[str, Staged]:
        """Every model's update of chunk ``sequence`` from ``states`` (the committed states
        before it, unless ``alone``), computed here or by helpers; stops at the first failure.
        Raises ``CutOff`` once the updates computed here have taken ``cutoff`` CPU seconds (the
        chunk's tasks closed: helpers stop)."""
        names = list(states)
        local: dict[str, Staged] = {}
        deadline = Deadline.cpu_after(self.budget, cutoff)
        # the costliest models first, so that the chunk's last update, which others wait for,
        # is a short one (longest-processing-time-first)
        tasks = sorted(names, key=lambda n: -runners[n].model.param_dim)
        if (alone or not self.shared or len(names) < 2
                or not self.board.open(cid, sequence, block, tasks)):  # not open: gone
            for name in names:
                local[name] = self._compute(runners[name], states[name], rows, prefix, sequence,
                                            deadline)
                if local[name].error:
                    break
            return local
        held = HeldTask(self.board, cid, self.ttl)
        try:
            with kept(held.renew, self.ttl, f"tasks-{cid}"):
                shared = self._share(cid, runners, states, rows, prefix, sequence, deadline, held)
        except CutOff:
            self.board.close(cid)
            raise
        if shared is None:  # closed under us (lost lease, deleted): our commit is a no-op
            return self.update_all(cid, runners, states, rows, block, prefix, sequence, cutoff)
        return shared

    def _share(self, cid: str, runners: dict[str, Runner], states: dict[str, bytes],
               rows: Rows, prefix: Any, sequence: int, deadline: Deadline,
               held: HeldTask) -> dict[str, Staged] | None:
        """The coordinator's side of an open chunk: claims and computes models until none is
        left, then waits for the helpers' results; None when the tasks were closed under it."""
        names, local = list(states), dict[str, Staged]()
        while True:
            name = self.board.claim(cid, sequence, self.ttl, kept=local)
            if name is not None:
                held.current = (sequence, name)
                local[name] = self._compute(runners[name], states[name], rows, prefix,
                                            sequence, deadline)
                held.current = None
                if local[name].error:
                    self.board.close(cid)
                    return local
                continue
            staged = self.board.results(cid, sequence, [n for n in names if n not in local])
            if staged is None:
                return None
            results = {**local, **staged}
            if any(r.error for r in staged.values()):
                self.board.close(cid)
                return results
            if len(results) == len(names):
                return {name: results[name] for name in names}
            self.board.wait(cid, self.ttl / 3)

    def help(self, cid: str, stopping: threading.Event) -> int:
        """Compute open model tasks of a comparison another worker coordinates; how many. The
        models this process cannot build (service/unavailable.py) are passed over, unclaimed:
        nothing counts against them."""
        if not self.shared:
            return 0
        opened = self.board.opened(cid)
        spec = None if opened is None else self.spec_of(cid)
        if opened is None or spec is None:
            return 0
        sequence, block = opened
        held = HeldTask(self.board, cid, self.ttl)
        with kept(held.renew, self.ttl, f"tasks-{cid}"):
            return self._help_chunk(cid, sequence, decode_block(block), stopping, held,
                                    unbuildable(spec))

    def _help_chunk(self, cid: str, sequence: int, rows: Rows, stopping: threading.Event,
                    held: HeldTask, passed: list[str]) -> int:
        done = 0
        while not stopping.is_set():
            name = self.board.claim(cid, sequence, self.ttl, kept=passed)
            if name is None:
                return done
            held.current = (sequence, name)
            committed = self.board.committed_state(cid, name)
            if committed is None or committed[1] != sequence - 1:
                return done  # the chunk was committed meanwhile: the claim lapses unused
            spec = _spec(committed[0])
            runner = runner_for(spec, next(m for m in spec.models if m.name == name))
            history = self.cache.of(cid, spec, sequence - 1)
            result = self._compute(runner, committed[2], rows, history.prefix(sequence - 1),
                                   sequence, Deadline.cpu_after(self.budget))
            self.board.stage(cid, sequence, name, result)
            held.current = None
            done += 1
        return done

    @staticmethod
    def _compute(runner: Runner, state: bytes, rows: Rows, prefix: Any, sequence: int,
                 deadline: Deadline) -> Staged:
        return update_model(runner, runner.load(state), rows, prefix, sequence, deadline)


@functools.lru_cache(maxsize=64)
def _spec(data: bytes) -> ComparisonSpec:
    return ComparisonSpec.model_validate_json(data)
