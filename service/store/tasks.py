"""The Redis side of sharing one chunk's model updates among workers (service/parallel.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import redis

from modelcompare.service.progress import Reading
from modelcompare.service.store import task_scripts
from modelcompare.service.store.connection import BLOCK_MAX
from modelcompare.service.store.keys import Keys, work_channel


@dataclass(frozen=True)
class Staged:
    """One model's staged result: its new state and what it reads, or why it failed."""

    state: bytes
    reading: Reading | None
    error: str | None = None
    # the failure was running past the chunk's compute budget, which the models one worker
    # computes share: the model it stopped in is not necessarily the slow one
    over_budget: bool = False


class TaskBoard:
    def __init__(self, client: redis.Redis, prefix: str, consumer: str) -> None:
        self.client = client
        self.prefix = prefix
        self.consumer = consumer
        self._open = client.register_script(task_scripts.OPEN_TASKS)
        self._claim = client.register_script(task_scripts.CLAIM_TASK)
        self._renew = client.register_script(task_scripts.RENEW_TASK)
        self._stage = client.register_script(task_scripts.STAGE_TASK)

    def open(self, cid: str, sequence: int, block: bytes, models: list[str]) -> bool:
        """Open the chunk's model tasks; False when the comparison is gone."""
        keys = Keys(self.prefix, cid)
        return bool(self._open(keys=[keys.tasks, keys.tasks_done, keys.meta],
                               args=[sequence, block, "\n".join(models),
                                     work_channel(self.prefix), cid]))

    def opened(self, cid: str) -> tuple[int, bytes] | None:
        """The sequence and block of the chunk whose model updates are open, if any."""
        sequence, block = self.client.hmget(Keys(self.prefix, cid).tasks, "sequence", "block")
        return None if sequence is None else (int(sequence), block)

    def claim(self, cid: str, sequence: int, ttl: float,
              kept: Collection[str] = ()) -> str | None:
        """A model of the chunk to compute, claimed for ``ttl`` seconds; None when every one
        is staged, claimed by a live worker or among ``kept`` (computed by the caller)."""
        name = self._claim(keys=[Keys(self.prefix, cid).tasks],
                           args=[sequence, self.consumer, _ms(ttl), *kept])
        return None if name is None else name.decode()

    def renew(self, cid: str, sequence: int, name: str, ttl: float) -> bool:
        return bool(self._renew(keys=[Keys(self.prefix, cid).tasks],
                                args=[sequence, name, self.consumer, _ms(ttl)]))

    def stage(self, cid: str, sequence: int, name: str, result: Staged) -> None:
        keys = Keys(self.prefix, cid)
        reading = b"" if result.reading is None else result.reading.model_dump_json()
        self._stage(keys=[keys.tasks, keys.tasks_done, keys.meta],
                    args=[sequence, name, result.state, reading, result.error or "",
                          int(result.over_budget)])

    def wait(self, cid: str, timeout: float) -> None:
        """Until a staged result lands, or ``timeout`` seconds pass (at most ``BLOCK_MAX``:
        a longer block would outlast the socket timeout; the caller looks again anyway)."""
        self.client.blpop([Keys(self.prefix, cid).tasks_done], timeout=min(timeout, BLOCK_MAX))

    def results(self, cid: str, sequence: int, names: list[str]) -> dict[str, Staged] | None:
        """The results staged so far among ``names``; None when the tasks are for another chunk
        (or none)."""
        kinds = ("state", "summary", "error", "over_budget")
        fields = ["sequence"] + [f"{kind}:{n}" for n in names for kind in kinds]
        values = self.client.hmget(Keys(self.prefix, cid).tasks, fields)
        if values[0] is None or int(values[0]) != sequence:
            return None
        staged = {}
        for index, name in enumerate(names):
            state, summary, error, over_budget = values[1 + 4 * index : 5 + 4 * index]
            if error is not None:
                staged[name] = Staged(b"", None, error.decode(), over_budget == b"1")
            elif summary is not None:
                staged[name] = Staged(state, Reading.model_validate_json(summary))
        return staged

    def committed_state(self, cid: str, name: str) -> tuple[bytes, int, bytes] | None:
        """The comparison's spec, applied sequence and ``name``'s state, read together."""
        keys = Keys(self.prefix, cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(keys.meta, "spec", "sequence")
        pipe.hget(keys.states, name)
        (spec, sequence), state = pipe.execute()
        if spec is None or state is None:
            return None
        return spec, int(sequence), state

    def close(self, cid: str) -> None:
        """Drop the tasks (after a failure: a retry computes every model again)."""
        keys = Keys(self.prefix, cid)
        self.client.delete(keys.tasks, keys.tasks_done)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
