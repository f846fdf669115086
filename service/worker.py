"""The stream worker: applies queued chunks of each comparison in sequence order, exactly once.

One ``Worker`` is one lane of a worker process (lanes.py, worker_process.py). It serves
comparisons round-robin (scheduling.py) under a short lease each (lease.py: one lane applies a
comparison's chunks, in order), claims entries a dead worker left pending (XAUTOCLAIM),
computes every model's new state and the comparison's progress record (progress.py; the public
evidence body is its projection, evidence.py), evaluates the decision rules on it (decisions.py)
and commits them, with the rules' events, in one compare-and-set script on the comparison's
version: a stale or redelivered write is a no-op. A chunk whose update fails is
retried, then its failing models leave or it is dead-lettered (poison.py); either way the
comparison reports itself degraded, never silently. A comparison with a model this process
cannot build (its family's plugin missing here) is left alone for a worker that can
(unavailable.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import redis

from modelcompare.estimators import CutOff
from modelcompare.service.catch_up import catch_up_all
from modelcompare.service.chunk_update import update_models
from modelcompare.service.commit import commit_of, skip_commit
from modelcompare.service.core.config import Settings
from modelcompare.service.decisions import decide
from modelcompare.service.engine import runners_of
from modelcompare.service.housekeeping import Housekeeping
from modelcompare.service.lanes import Lane
from modelcompare.service.lease import Lease, held
from modelcompare.service.metrics import Metrics
from modelcompare.service.parallel import ModelTasks
from modelcompare.service.poison import ChunkFailed, Poison
from modelcompare.service.reducers import after_chunk, marked_failed, settled
from modelcompare.service.scheduling import Schedule
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.connection import UNAVAILABLE, SyncClient
from modelcompare.service.store.history import HistoryCache
from modelcompare.service.store.queue import GONE, STALE, Queue
from modelcompare.service.store.tasks import TaskBoard
from modelcompare.service.store.work import WorkFinder
from modelcompare.service.store.work_records import Commit, DeadLetter, Entry, Retention, Snapshot
from modelcompare.service.unavailable import LeftAlone

log = logging.getLogger("modelcompare.worker")

# Chunks a worker reads from a comparison's stream ahead of applying them, in bytes (at most
# batch_chunks, at least one): 16 chunks of 31 MB held at once took a worker past 1 GB.
READ_AHEAD_BYTES = 64 * 1024 * 1024


class Worker:
    def __init__(
        self,
        client: SyncClient,
        settings: Settings,
        consumer: str | None = None,
        metrics: Metrics | None = None,
        lane: Lane | None = None,
    ) -> None:
        self.settings = settings
        self.lane = lane or Lane()
        self.queue = Queue(client, settings.key_prefix, consumer, Retention.of(settings))
        self.work = WorkFinder(client, settings.key_prefix, settings.work_sweep_interval)
        self.cache = HistoryCache(client, settings.key_prefix, settings.history_cache,
                                  settings.history_cache_bytes)
        self.metrics = metrics
        self.tasks = ModelTasks(TaskBoard(client, settings.key_prefix, self.queue.consumer),
                                self.cache, settings.lease_ttl, settings.parallel_models,
                                settings.update_budget, self.queue.spec)
        self.schedule = Schedule(settings.poll_interval, settings.failure_backoff_max)
        self.left_alone = LeftAlone(self.queue, self.schedule, settings.failure_backoff_max,
                                    metrics)
        self.stopping = threading.Event()  # run's stop: the current update ends the lease
        self._block_bytes: dict[str, int] = {}  # the last chunk's block size per comparison
        self.poison = Poison(self.queue, settings, self._compute_counted)
        self.housekeeping = None if self.lane.index else Housekeeping(
            self.queue, self.work, settings.housekeeping_interval, settings.consumer_idle_max)

    def run(self, stop: threading.Event) -> None:
        """Serve every comparison until ``stop`` is set; sleeps on the work channel when idle
        (store/work.py: no comparison is read until one gets work, except a slow safety
        sweep). On ``stop`` the update under way finishes and its lease is released."""
        self.stopping = stop
        try:
            while not stop.is_set():
                try:
                    if self.housekeeping is not None:
                        self.housekeeping.run_if_due()
                    if not self.run_once():
                        self.work.wait(self.settings.poll_interval, stop)
                except UNAVAILABLE as exc:  # e.g. Redis restarting, a cluster master down
                    log.warning("redis unavailable: %s: %s", type(exc).__name__, exc)
                    self.work.close()  # subscribe again and sweep: messages may be lost
                    stop.wait(self.settings.poll_interval)
                    continue
                except Exception:  # keep serving the other comparisons; this one is retried
                    log.exception("worker step failed")
                    stop.wait(self.settings.poll_interval)
                    continue
        finally:
            self.work.close()

    def run_once(self) -> bool:
        """One round-robin pass over the comparisons known to have work (announced on the
        work channel, found by a sweep, or left with work by an earlier pass); True when
        something was committed. A step that fails outside any chunk's update backs its
        comparison off."""
        busy = False
        for cid in self.schedule.order([c for c in self.work.ready() if self.lane.admits(c)]):
            if self.stopping.is_set():
                break
            try:
                with held(self.queue, cid, self.settings.lease_ttl) as lease:
                    if lease is None:
                        committed = self._help(cid)
                    else:
                        with self.lane.book.serving(cid):
                            committed = self.serve(cid, lease)
            except (redis.ConnectionError, redis.TimeoutError):
                raise
            except Exception:
                delay = self.schedule.failed(cid)
                log.exception("comparison %s: step failed; served again in %.1f s", cid, delay)
                continue
            self.schedule.served(cid)
            busy = committed > 0 or busy
        return busy

    def _help(self, cid: str) -> int:
        # a helper's update may be costly: the other lanes help, those of other processes only
        if self.lane.express or self.lane.book.served_here(cid):
            return 0
        helped = self.tasks.help(cid, self.stopping)
        if helped and self.metrics is not None:
            self.metrics.helped.inc(helped)
        return helped

    def serve(self, cid: str, lease: Lease) -> int:
        """Apply up to ``batch_chunks`` steps of one comparison while ``lease`` holds."""
        snap = self.queue.snapshot(cid)
        if snap is None:
            self.cache.forget(cid)
            self.lane.book.forget(cid)
            self.left_alone.forget(cid)
            return 0
        if snap.halted or self.left_alone.check(cid, snap):
            return 0
        batch = self.settings.batch_chunks
        # chunks read ahead: about READ_AHEAD_BYTES of them, as large as this comparison's are
        ahead = max(1, min(batch, READ_AHEAD_BYTES // self._block_bytes.get(cid, READ_AHEAD_BYTES)))
        pending = deque(self.queue.claim(cid, batch) + self.queue.read(cid, ahead))
        commits = 0
        slice_ends = time.thread_time() + self.lane.cutoff
        while (commits < batch and not lease.lost.is_set() and not self.stopping.is_set()
               and (commits == 0 or time.thread_time() < slice_ends)):
            if self.lane.express and snap.progress.catching_up:
                self.lane.hand_over(cid)  # a replay is bulk work: for the general lanes
                return commits
            entry = pending.popleft() if pending else next(iter(self.queue.read(cid, 1)), None)
            if entry is not None:
                self._block_bytes[cid] = max(len(entry.block), 1)
            if entry is not None and entry.sequence <= snap.sequence:
                if self.queue.ack_applied(cid, entry):
                    continue  # redelivered: already applied
                return commits  # the store is behind this snapshot: read it again next pass
            if entry is not None and entry.sequence != snap.sequence + 1:
                log.error("comparison %s: chunk %d arrived after %d", cid, entry.sequence,
                          snap.sequence)
                return commits
            if entry is None and not snap.progress.catching_up:
                return commits
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                commit = self._attempt(cid, snap, entry)
            except CutOff:
                log.info("comparison %s: chunk %d passed the express lane's %.2g CPU s; left to "
                         "the other lanes", cid, snap.sequence + 1, self.lane.cutoff)
                self.lane.hand_over(cid)
                return commits
            if commit is None:
                return commits  # retried on a later pass, after a back-off
            result = self.queue.commit(cid, commit)
            if result == GONE:
                self.cache.forget(cid)
                return commits
            if result == STALE:
                if entry is not None:
                    pending.appendleft(entry)
                fresh = self.queue.snapshot(cid)
                if fresh is None or fresh.halted or self.left_alone.check(cid, fresh):
                    return commits  # e.g. a model was added that this worker cannot build
                snap = fresh
                continue
            commits += 1
            self.schedule.succeeded(cid)
            if entry is not None:
                self.lane.book.record(cid, time.thread_time() - cpu_started)
            for name, why in commit.marked_unreliable.items():
                log.warning("comparison %s: model %s unreliable: %s", cid, name, why)
            for name, why in commit.failed_models.items():
                log.error("comparison %s: model %s failed and left the comparison: %s", cid,
                          name, why)
            if self.metrics is not None:
                self.metrics.observe(commit, time.perf_counter() - started)
            if commit.halt:
                return commits
            snap = self._advance(cid, snap, commit)
        return commits

    def _attempt(self, cid: str, snap: Snapshot, entry: Entry | None) -> Commit | None:
        """The step's commit; for a chunk that failed, the commit that gives it up once its
        attempts are spent, else None (it is backed off). ``CutOff`` on the express lane."""
        try:
            return self._compute_counted(cid, snap, entry)
        except ChunkFailed as failure:
            assert entry is not None
            given_up = self.poison.give_up(cid, snap, entry, failure)
            if given_up is None:
                self.schedule.failed(cid)
            return given_up

    def _compute_counted(self, cid: str, snap: Snapshot, entry: Entry | None,
                         dead_letter: DeadLetter | None = None,
                         failing: dict[str, str] | None = None) -> Commit:
        """``compute``, where a failure outside the estimator (the history cache, a runner, the
        evidence body) costs the chunk an attempt like an estimator's: never a silent retry. It
        raises as ``ChunkFailed`` naming no model."""
        try:
            return self.compute(cid, snap, entry, dead_letter, failing)
        except (ChunkFailed, CutOff, redis.ConnectionError, redis.TimeoutError):
            raise
        except Exception as exc:
            if entry is None:  # a catch-up step has no chunk to count against: backed off
                raise
            log.exception("comparison %s: chunk %d failed outside the estimator", cid,
                          entry.sequence)
            raise ChunkFailed(f"outside the estimator: {type(exc).__name__}: {exc}") from exc

    def compute(self, cid: str, snap: Snapshot, entry: Entry | None,
                dead_letter: DeadLetter | None = None,
                failing: dict[str, str] | None = None) -> Commit:
        """The commit for one step: catch-up replay of late models, then the chunk (if any).

        Raises ``ChunkFailed`` when an estimator cannot absorb the chunk. With ``dead_letter``
        (or when the operator chose to skip this chunk) the chunk is committed as an empty block:
        the models leave it out, and the comparison reports itself degraded. The models in
        ``failing`` are marked failed with the reason given and leave the comparison before the
        chunk is applied to the others. Reads and writes the progress record only: the evidence
        body is its projection, made by ``commit_of``.
        """
        history = self.cache.of(cid, snap.spec, snap.sequence)
        runners = runners_of(snap.spec)
        progress, states = catch_up_all(runners, snap, marked_failed(snap.progress, failing or {}),
                                        history, self.settings)
        if entry is None:
            return commit_of(snap, settled(progress), states)
        if dead_letter is not None or snap.skip == entry.sequence:
            return skip_commit(snap, progress, states, entry, dead_letter)
        updated = update_models(self.tasks, cid, snap, entry, runners, progress, states, history,
                                self.lane.cutoff)
        progress = after_chunk(progress, updated.readings, entry.sequence, updated.rows,
                               updated.seconds, self.settings)
        progress, events = decide(snap.spec, progress, time.time())
        return commit_of(snap, progress, {**states, **updated.states}, entry, entry.block,
                         events=tuple(events))

    def _advance(self, cid: str, snap: Snapshot, commit: Commit) -> Snapshot:
        if commit.entry_id:
            history = self.cache.of(cid, snap.spec, snap.sequence)
            if history.loaded == snap.sequence:
                history.append(decode_block(commit.block))
        return Snapshot(
            spec=snap.spec,
            version=snap.version + 1,
            sequence=commit.sequence,
            progress=commit.progress,
            states={**snap.states, **commit.states},
        )
