"""The stream worker: applies queued chunks of each comparison in sequence order, exactly once.

A worker holds a short lease per comparison while it applies chunks (so chunks of one comparison
run in order), claims entries a dead worker left pending (XAUTOCLAIM), computes every model's
new state, and commits with one compare-and-set script on the comparison's version: a stale or
redelivered write is a no-op. Models added mid-stream replay the stored history block by block.

A chunk an estimator fails on is retried up to ``poison_max_attempts`` times (failures are
counted in Redis, so they add up across workers), then dead-lettered in the commit script: with
``poison_policy="halt"`` the comparison keeps its last good state and stops on that chunk until
an operator resumes it (retry or skip); with ``"skip"`` it commits the chunk as an empty block and
goes on. Either way it reports itself degraded, never silently.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import redis

from estimators import Rows, state_to_bytes
from service.core.config import Settings
from service.engine import Runner
from service.evidence import evidence_body, model_summaries
from service.metrics import Metrics
from service.store.codec import decode_block, empty_block
from service.store.history import HistoryCache
from service.store.keys import work_channel
from service.store.queue import GONE, STALE, Commit, DeadLetter, Entry, Queue, Snapshot

log = logging.getLogger("modelcompare.worker")


class ChunkFailed(Exception):
    """An estimator could not absorb a chunk (raised, or its log evidence became non-finite)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Worker:
    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        consumer: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.queue = Queue(client, settings.key_prefix, consumer)
        self.cache = HistoryCache(client, settings.key_prefix, settings.history_cache)
        self.metrics = metrics

    def run(self, stop: threading.Event) -> None:
        """Serve every comparison until ``stop`` is set; sleeps on the work channel when idle."""
        pubsub = self.queue.client.pubsub(ignore_subscribe_messages=True)
        try:
            while not stop.is_set():
                try:
                    if not pubsub.subscribed:  # here, so a worker may start before Redis
                        pubsub.subscribe(work_channel(self.settings.key_prefix))
                    if not self.run_once():
                        pubsub.get_message(timeout=self.settings.poll_interval)
                except redis.ConnectionError as exc:  # e.g. Redis restarting: retry until back
                    log.warning("redis unreachable: %s", exc)
                    stop.wait(self.settings.poll_interval)
                    continue
                except Exception:  # keep serving the other comparisons; this one is retried
                    log.exception("worker step failed")
                    stop.wait(self.settings.poll_interval)
                    continue
        finally:
            pubsub.close()

    def run_once(self) -> bool:
        """One pass over the comparisons with work; True when something was committed."""
        busy = False
        for cid in self.queue.comparison_ids():
            if not self.queue.has_work(cid) or not self.queue.acquire(cid, self.settings.lease_ttl):
                continue
            try:
                busy = self.serve(cid) > 0 or busy
            finally:
                self.queue.release(cid)
        return busy

    def serve(self, cid: str) -> int:
        """Apply up to ``batch_chunks`` steps of one comparison whose lease we hold."""
        snap = self.queue.snapshot(cid)
        if snap is None:
            self.cache.forget(cid)
            return 0
        if snap.halted:
            return 0
        batch = self.settings.batch_chunks
        pending = deque(self.queue.claim(cid, batch) + self.queue.read(cid, batch))
        commits = 0
        while commits < batch and self.queue.renew(cid, self.settings.lease_ttl):
            entry = pending.popleft() if pending else next(iter(self.queue.read(cid, 1)), None)
            if entry is not None and entry.sequence <= snap.sequence:
                self.queue.ack(cid, entry.id)  # redelivered: already applied
                continue
            if entry is not None and entry.sequence != snap.sequence + 1:
                log.error("comparison %s: chunk %d arrived after %d", cid, entry.sequence,
                          snap.sequence)
                return commits
            if entry is None and not catching_up(snap):
                return commits
            started = time.perf_counter()
            try:
                with self._heartbeat(cid):
                    commit = self.compute(cid, snap, entry)
            except ChunkFailed as failure:
                assert entry is not None
                given_up = self._give_up(cid, snap, entry, failure)
                if given_up is None:
                    return commits  # retried on a later pass, after the poll interval
                commit = given_up
            result = self.queue.commit(cid, commit)
            if result == GONE:
                self.cache.forget(cid)
                return commits
            if result == STALE:
                if entry is not None:
                    pending.appendleft(entry)
                fresh = self.queue.snapshot(cid)
                if fresh is None or fresh.halted:
                    return commits
                snap = fresh
                continue
            commits += 1
            self._observe(commit, time.perf_counter() - started)
            if commit.halt:
                return commits
            snap = self._advance(cid, snap, commit)
        return commits

    def compute(self, cid: str, snap: Snapshot, entry: Entry | None,
                dead_letter: DeadLetter | None = None) -> Commit:
        """The commit for one step: catch-up replay of late models, then the chunk (if any).

        Raises ``ChunkFailed`` when an estimator cannot absorb the chunk. With ``dead_letter``
        (or when the operator chose to skip this chunk) the chunk is committed as an empty block:
        the models leave it out, and the comparison reports itself degraded.
        """
        history = self.cache.get(cid, snap.spec.x_dim, snap.spec.has_y, snap.sequence)
        models = model_summaries(snap.evidence)
        runners = {m.name: Runner(snap.spec, m) for m in snap.spec.models}
        states: dict[str, Any] = {}
        for name, summary in models.items():
            if summary["catching_up"]:
                states[name] = self._catch_up(runners[name], snap, summary, history)
        sequence, block, error = snap.sequence, b"", snap.evidence["last_error"]
        n_observations, trace, seconds = snap.evidence["n_observations"], None, None
        skipped = snap.evidence.get("skipped_chunks", 0)
        reason = snap.evidence.get("status_reason") if skipped else None
        if entry is not None:
            sequence, block = entry.sequence, entry.block
            rows = decode_block(entry.block)
            joined = [n for n, s in models.items() if not s["catching_up"] and not s["failed"]]
            if dead_letter is None and snap.skip != sequence:
                started = time.perf_counter()
                updated = self._update(runners, snap, states, joined, rows,
                                       history.prefix(snap.sequence), sequence)
                seconds = time.perf_counter() - started
                n_observations += rows.count
                for name, (state, info) in updated.items():
                    states[name] = state
                    models[name].update(runners[name].summary(state, info))
            else:
                block = empty_block(snap.spec.x_dim, snap.spec.has_y)
                message = "skipped by the operator" if dead_letter is None else dead_letter.error
                error = {"sequence": sequence, "message": message}
                skipped += 1
                reason = (f"{skipped} chunk(s) dead-lettered and skipped, their rows left out of "
                          f"the evidence (last: chunk {sequence}, {message})")
            for name in joined:
                models[name]["sequence"] = sequence
            trace = {"sequence": sequence, "version": snap.version + 1,
                     "n_observations": n_observations,
                     "compute_seconds": None if seconds is None else round(seconds, 4),
                     "models": {n: _trace_point(models[n]) for n in joined}}
        body = evidence_body(snap.spec, models, version=snap.version + 1, sequence=sequence,
                             n_observations=n_observations, last_error=error,
                             compute_seconds=seconds, status_reason=reason,
                             skipped_chunks=skipped)
        return Commit(
            version=snap.version,
            sequence=sequence,
            entry_id="" if entry is None else entry.id,
            block=block,
            evidence=body,
            trace=trace,
            states={name: state_to_bytes(state) for name, state in states.items()},
            catching_up=sum(bool(s["catching_up"]) for s in models.values()),
            status_reason=reason,
            dead_letter=dead_letter,
        )

    @staticmethod
    def _update(runners: dict[str, Runner], snap: Snapshot, states: dict[str, Any],
                joined: list[str], rows: Rows, prefix: Any, sequence: int) -> dict[str, Any]:
        """Every joined model's update; ``ChunkFailed`` if one raises or loses finiteness."""
        updated = {}
        for name in joined:
            runner = runners[name]
            try:
                state, info = runner.update(_state(runner, snap, states, name), rows, prefix,
                                            sequence)
                log_z = runner.estimator.log_evidence(state)
            except Exception as exc:  # EstimatorError, bad values, or a bug: all retried
                raise ChunkFailed(f"model {name!r}: {type(exc).__name__}: {exc}") from exc
            if not math.isfinite(log_z):
                raise ChunkFailed(f"model {name!r}: log evidence became {log_z}")
            updated[name] = (state, info)
        return updated

    def _give_up(self, cid: str, snap: Snapshot, entry: Entry,
                 failure: ChunkFailed) -> Commit | None:
        """None while the chunk has attempts left; else the commit that dead-letters it."""
        attempts = self.queue.record_failure(cid, entry.sequence)
        limit = self.settings.poison_max_attempts
        if attempts < limit:
            log.warning("comparison %s: chunk %d failed (attempt %d of %d): %s", cid,
                        entry.sequence, attempts, limit, failure.message)
            return None
        halt = self.settings.poison_policy == "halt"
        log.error("comparison %s: chunk %d dead-lettered after %d attempts (%s): %s", cid,
                  entry.sequence, attempts, "halting" if halt else "skipping it",
                  failure.message)
        letter = DeadLetter(failure.message, attempts, "halted" if halt else "skipped",
                            entry.block)
        if not halt:
            return self.compute(cid, snap, entry, dead_letter=letter)
        reason = (f"halted at chunk {entry.sequence}: it failed {attempts} attempt(s), last "
                  f"{failure.message}; later chunks wait for POST /v1/comparisons/{cid}/resume")
        body = evidence_body(snap.spec, model_summaries(snap.evidence),
                             version=snap.version + 1, sequence=snap.sequence,
                             n_observations=snap.evidence["n_observations"],
                             last_error={"sequence": entry.sequence, "message": failure.message},
                             status_reason=reason,
                             skipped_chunks=snap.evidence.get("skipped_chunks", 0),
                             halted_at=entry.sequence)
        return Commit(version=snap.version, sequence=entry.sequence, entry_id=entry.id,
                      block=b"", evidence=body, trace=None, states={},
                      catching_up=sum(bool(m["catching_up"]) for m in snap.evidence["models"]),
                      status_reason=reason, halt=True, dead_letter=letter)

    def _catch_up(self, runner: Runner, snap: Snapshot, summary: dict[str, Any],
                  history: Any) -> Any:
        """Replay stored blocks (each with its own sequence) for a model added mid-stream."""
        state = runner.load(snap.states[runner.name])
        target = min(snap.sequence, summary["sequence"] + self.settings.batch_chunks)
        try:
            for sequence in range(summary["sequence"] + 1, target + 1):
                rows = history.block(sequence - 1)
                if rows.count:
                    state, info = runner.update(state, rows, history.prefix(sequence - 1),
                                                sequence)
                    summary.update(runner.summary(state, info))
                summary["sequence"] = sequence
        except Exception as exc:
            log.exception("model %s failed while catching up", runner.name)
            summary.update(failed=f"{type(exc).__name__}: {exc}", catching_up=False)
            return runner.load(snap.states[runner.name])
        summary["catching_up"] = summary["sequence"] < snap.sequence
        return state

    @contextlib.contextmanager
    def _heartbeat(self, cid: str) -> Iterator[None]:
        """Keep renewing the lease while a long update runs, so no other worker takes over."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.settings.lease_ttl / 3):
                self.queue.renew(cid, self.settings.lease_ttl)

        thread = threading.Thread(target=beat, name=f"lease-{cid}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _advance(self, cid: str, snap: Snapshot, commit: Commit) -> Snapshot:
        if commit.entry_id:
            history = self.cache.get(cid, snap.spec.x_dim, snap.spec.has_y, snap.sequence)
            if history.loaded == snap.sequence:
                history.append(decode_block(commit.block))
        return Snapshot(
            spec=snap.spec,
            version=snap.version + 1,
            sequence=commit.sequence,
            evidence=commit.evidence,
            states={**snap.states, **commit.states},
        )

    def _observe(self, commit: Commit, seconds: float) -> None:
        if self.metrics is None or not commit.entry_id:
            return
        self.metrics.update_seconds.observe(seconds)
        if commit.dead_letter is not None:
            self.metrics.dead_lettered.inc()
        elif not commit.halt:
            self.metrics.processed.inc()


def catching_up(snap: Snapshot) -> bool:
    return any(m["catching_up"] for m in snap.evidence["models"])


def _state(runner: Runner, snap: Snapshot, states: dict[str, Any], name: str) -> Any:
    return states[name] if name in states else runner.load(snap.states[name])


def _trace_point(summary: dict[str, Any]) -> dict[str, Any]:
    """One model's point of the trace (GET /history): log Z ± stderr and n, and the diagnostics
    the dashboard plots, ESS (one decimal, as shown) and the update's annealing steps."""
    ess, info = summary["ess"], summary.get("info") or {}
    return {**{k: summary[k] for k in ("log_evidence", "log_evidence_stderr", "n_observations")},
            "ess": None if ess is None else round(ess, 1),
            "annealing_steps": info.get("annealing_steps")}
