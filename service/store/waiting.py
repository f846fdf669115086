"""The waiting record (``Keys.waiting``): why a worker left a comparison alone because it cannot
build one of its models (written by service/unavailable.py, deleted by the next applied commit
or its time to live), and the status ``waiting`` readers see while it stands."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from modelcompare.service.store.connection import AsyncClient
from modelcompare.service.store.keys import Keys

if TYPE_CHECKING:
    from modelcompare.service.store.meta import Meta


@dataclass(frozen=True)
class Waiting:
    """Why ``worker`` (its consumer name) left the comparison alone at ``at`` (Unix time):
    ``ModelSpec.unavailable`` of its first model it cannot build."""

    reason: str
    worker: str
    at: float

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> Waiting:
        record = json.loads(raw)
        return cls(str(record["reason"]), str(record["worker"]), float(record["at"]))

    def describe(self) -> str:
        return (f"{self.worker} cannot serve it: {self.reason}; its chunks wait for a worker "
                "that can")


def shown_status(degraded: str | None, waiting: Waiting | None,
                 queued: bool) -> tuple[str, str | None]:
    """The status readers see, with its reason: ``degraded`` (halted on or skipped a
    dead-lettered chunk) wins; then ``waiting`` while a waiting record stands and chunks are
    queued; else ``ok``."""
    if degraded:
        return "degraded", degraded
    if waiting is not None and queued:
        return "waiting", waiting.describe()
    return "ok", None


async def with_waiting(client: AsyncClient, prefix: str, metas: list[Meta]) -> list[Meta]:
    """``metas`` with the waiting records of those that have chunks queued (one pipeline)."""
    queued = [m.spec.id for m in metas if m.ingested > m.sequence and not m.status_reason]
    if not queued:
        return metas
    pipe = client.pipeline(transaction=False)
    for cid in queued:
        pipe.get(Keys(prefix, cid).waiting)
    found = {cid: raw for cid, raw in zip(queued, await pipe.execute(), strict=True) if raw}
    return [replace(m, waiting=Waiting.decode(found[m.spec.id])) if m.spec.id in found else m
            for m in metas]


async def shown_evidence(client: AsyncClient, keys: Keys) -> bytes | None:
    """The evidence body (JSON) as readers see it, None when the comparison is gone: as
    stored, but with status ``waiting`` and its reason (``shown_status``)."""
    # No MULTI: the status shown may lag a commit by one read, and on a Redis Cluster whose
    # master is down redis-py's transaction pipeline raises RuntimeError (a 500), not the
    # connection errors that become 503s.
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.evidence)
    pipe.get(keys.waiting)
    pipe.hget(keys.meta, "next_seq")
    raw, waiting, ingested = await pipe.execute()
    if raw is None or waiting is None:
        return raw
    body = json.loads(raw)
    status, reason = shown_status(body["status_reason"], Waiting.decode(waiting),
                                  int(ingested or 0) > body["sequence"])
    if status != "waiting":
        return raw
    return json.dumps({**body, "status": status, "status_reason": reason},
                      allow_nan=False).encode()
