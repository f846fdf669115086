"""The stream worker: applies queued chunks of each comparison in sequence order, exactly once.

A worker holds a short lease per comparison while it applies chunks (so chunks of one comparison
run in order), claims entries a dead worker left pending (XAUTOCLAIM), computes every model's
new state, and commits with one compare-and-set script on the comparison's version: a stale or
redelivered write is a no-op. Models added mid-stream replay the stored history block by block.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import redis

from estimators import state_to_bytes
from service.core.config import Settings
from service.engine import Runner
from service.evidence import evidence_body, model_summaries
from service.metrics import Metrics
from service.store.codec import decode_block, empty_block
from service.store.history import HistoryCache
from service.store.keys import work_channel
from service.store.queue import GONE, STALE, Commit, Entry, Queue, Snapshot

log = logging.getLogger("modelcompare.worker")


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
        pubsub.subscribe(work_channel(self.settings.key_prefix))
        try:
            while not stop.is_set():
                try:
                    busy = self.run_once()
                except redis.ConnectionError as exc:
                    log.warning("redis unreachable: %s", exc)
                    stop.wait(self.settings.poll_interval)
                    continue
                except Exception:  # keep serving the other comparisons; this one is retried
                    log.exception("worker step failed")
                    stop.wait(self.settings.poll_interval)
                    continue
                if not busy:
                    pubsub.get_message(timeout=self.settings.poll_interval)
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
            with self._heartbeat(cid):
                commit = self.compute(cid, snap, entry)
            result = self.queue.commit(cid, commit)
            if result == GONE:
                self.cache.forget(cid)
                return commits
            if result == STALE:
                if entry is not None:
                    pending.appendleft(entry)
                fresh = self.queue.snapshot(cid)
                if fresh is None:
                    return commits
                snap = fresh
                continue
            snap = self._advance(cid, snap, commit)
            commits += 1
            self._observe(commit, time.perf_counter() - started)
        return commits

    def compute(self, cid: str, snap: Snapshot, entry: Entry | None) -> Commit:
        """The commit for one step: catch-up replay of late models, then the chunk (if any)."""
        history = self.cache.get(cid, snap.spec.x_dim, snap.spec.has_y, snap.sequence)
        models = model_summaries(snap.evidence)
        runners = {m.name: Runner(snap.spec, m) for m in snap.spec.models}
        states: dict[str, Any] = {}
        for name, summary in models.items():
            if summary["catching_up"]:
                states[name] = self._catch_up(runners[name], snap, summary, history)
        sequence, block, error = snap.sequence, b"", snap.evidence["last_error"]
        n_observations, trace, seconds = snap.evidence["n_observations"], None, None
        if entry is not None:
            sequence, block = entry.sequence, entry.block
            rows = decode_block(entry.block)
            prefix = history.prefix(snap.sequence)
            joined = [n for n, s in models.items() if not s["catching_up"] and not s["failed"]]
            loaded = {n: _state(runners[n], snap, states, n) for n in joined}
            started = time.perf_counter()
            try:
                updated = {n: runners[n].update(loaded[n], rows, prefix, sequence)
                           for n in joined}
            except Exception as exc:  # the estimator cannot absorb this chunk: dead-letter it
                log.exception("comparison %s: chunk %d dead-lettered", cid, sequence)
                block = empty_block(snap.spec.x_dim, snap.spec.has_y)
                error = {"sequence": sequence, "message": f"{type(exc).__name__}: {exc}"}
            else:
                seconds = time.perf_counter() - started
                n_observations += rows.count
                for name, (state, info) in updated.items():
                    states[name] = state
                    models[name].update(runners[name].summary(state, info))
            for name in joined:
                models[name]["sequence"] = sequence
            trace = {"sequence": sequence, "version": snap.version + 1,
                     "n_observations": n_observations,
                     "models": {n: _trace_point(models[n]) for n in joined}}
        body = evidence_body(snap.spec, models, version=snap.version + 1, sequence=sequence,
                             n_observations=n_observations, last_error=error,
                             compute_seconds=seconds)
        return Commit(
            version=snap.version,
            sequence=sequence,
            entry_id="" if entry is None else entry.id,
            block=block,
            evidence=body,
            trace=trace,
            states={name: state_to_bytes(state) for name, state in states.items()},
            catching_up=sum(bool(s["catching_up"]) for s in models.values()),
        )

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
        if commit.evidence["last_error"] and commit.evidence["last_error"]["sequence"] == (
            commit.sequence
        ):
            self.metrics.dead_lettered.inc()
        else:
            self.metrics.processed.inc()


def catching_up(snap: Snapshot) -> bool:
    return any(m["catching_up"] for m in snap.evidence["models"])


def _state(runner: Runner, snap: Snapshot, states: dict[str, Any], name: str) -> Any:
    return states[name] if name in states else runner.load(snap.states[name])


def _trace_point(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in ("log_evidence", "log_evidence_stderr", "n_observations")}
