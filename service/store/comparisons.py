"""What the API does in Redis (asyncio client): create, read, ingest, add and remove models,
delete."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from modelcompare.estimators import Rows
from modelcompare.service.progress import ComparisonProgress, encode
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.store import listing, scripts
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.connection import AsyncClient, publish_command
from modelcompare.service.store.exported import Exported, exported
from modelcompare.service.store.keys import GROUP, Keys, created_key, index_key, work_channel
from modelcompare.service.store.listing import Page
from modelcompare.service.store.meta import META_FIELDS, Meta, meta_from_fields
from modelcompare.service.store.progress import read_progress
from modelcompare.service.store.resend import resend_on_lost_reply
from modelcompare.service.store.trace import decode_point
from modelcompare.service.store.waiting import shown_evidence, with_waiting


class NotFound(LookupError):
    """No comparison with that id."""


# How long the receipt of a request's identity is kept (ms): past every re-send of one request
# (seconds), with room for a slow pool; a client's own idempotency key lasts idempotency_ttl.
RECEIPT_TTL_MS = 10 * 60 * 1000


class Ingested(NamedTuple):
    """What ``Comparisons.ingest`` did: ``status`` accepted (also when a re-send found its own
    first run recorded), duplicate (the client's key recorded a chunk with the same body),
    conflict (the key was used with another body), missing (no comparison), stale
    (a model was added since the chunk was validated) or full (the comparison holds too many
    bytes of chunks; ``sequence`` is then the bytes it holds). For a duplicate or conflict,
    ``sequence`` and ``rows`` are those of the chunk first recorded under the key (``rows`` None
    for a record older than that field)."""

    status: str
    sequence: int
    rows: int | None


class Comparisons:
    def __init__(self, client: AsyncClient, prefix: str, idempotency_ttl: float) -> None:
        self.client = client
        self.prefix = prefix
        self._idempotency_ms = int(idempotency_ttl * 1000)
        self._publish = publish_command(client)
        self._create = client.register_script(scripts.CREATE)
        self._ingest = client.register_script(scripts.INGEST)
        self._add_model = client.register_script(scripts.ADD_MODEL)
        self._remove_model = client.register_script(scripts.REMOVE_MODEL)
        self._delete = client.register_script(scripts.DELETE)

    def keys(self, cid: str) -> Keys:
        return Keys(self.prefix, cid)

    async def create(self, spec: ComparisonSpec, progress: ComparisonProgress,
                     evidence: dict[str, Any], states: dict[str, bytes]) -> None:
        """Write the comparison (its progress record, the evidence body that is its public
        view, the model states) and list it. The new id is the request's identity: a re-send
        after a lost reply finds the comparison written and changes nothing. On a failure that
        outlasts the re-sends (Redis unreachable, the request cancelled) remove whatever was
        written, then raise."""
        keys = self.keys(spec.id)
        pairs: list[Any] = [item for name, data in states.items() for item in (name, data)]
        try:
            await resend_on_lost_reply(lambda: self._create(
                keys=[keys.meta, keys.states, keys.evidence, keys.stream, keys.progress],
                args=[spec.model_dump_json(), json.dumps(evidence, allow_nan=False), GROUP,
                      encode(progress), *pairs],
            ), "create")
            await self.client.sadd(index_key(self.prefix), spec.id)
            await self.client.zadd(created_key(self.prefix), {spec.id: spec.created_at})
        except BaseException:
            # The index is outside the comparison's hash tag (one script cannot write both on a
            # cluster), so an interrupted create is undone here; Redis runs these after the
            # script if it is still running.
            with contextlib.suppress(Exception):
                await self._remove(spec.id)
            raise

    async def ids(self) -> list[str]:
        return sorted(m.decode() for m in await self.client.smembers(index_key(self.prefix)))

    async def meta(self, cid: str) -> Meta:
        keys = self.keys(cid)
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(keys.meta, *META_FIELDS)
        pipe.get(keys.waiting)
        fields, waiting = await pipe.execute()
        meta = meta_from_fields(fields, waiting)
        if meta is None:
            raise NotFound(cid)
        return meta

    async def page(self, limit: int, cursor: str | None = None,
                   visible: Callable[[str, str], bool] | None = None,
                   examine: int = 1000) -> Page:
        """One page of the listing (``modelcompare.service.store.listing.page``), with the
        waiting records of the comparisons that have chunks queued."""
        found = await listing.page(self, limit, cursor, visible, examine)
        return Page(await with_waiting(self.client, self.prefix, found.comparisons),
                    found.next_cursor)

    async def shown_evidence(self, cid: str) -> bytes:
        """The evidence body (JSON) as readers see it (``waiting.shown_evidence``)."""
        raw = await shown_evidence(self.client, self.keys(cid))
        if raw is None:
            raise NotFound(cid)
        return raw

    async def evidence(self, cid: str) -> dict[str, Any]:
        """The evidence body as stored."""
        raw = await self.client.get(self.keys(cid).evidence)
        if raw is None:
            raise NotFound(cid)
        return json.loads(raw)

    async def progress(self, cid: str) -> ComparisonProgress:
        """The progress record at the current version (what a write builds on); built from the
        stored evidence body where none is stored at that version (service/migration.py)."""
        progress = await read_progress(self.client, self.keys(cid))
        if progress is None:
            raise NotFound(cid)
        return progress

    async def trace(self, cid: str) -> list[dict[str, Any]]:
        await self.meta(cid)
        stored = await self.client.lrange(self.keys(cid).trace, 0, -1)
        return [decode_point(item) for item in stored]

    async def states(
        self, cid: str
    ) -> tuple[ComparisonSpec, dict[str, Any], dict[str, bytes]]:
        """Spec, evidence body and model states of one version (read in one transaction)."""
        keys = self.keys(cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(keys.meta, "spec")
        pipe.get(keys.evidence)
        pipe.hgetall(keys.states)
        spec, evidence, states = await pipe.execute()
        if spec is None or evidence is None:
            raise NotFound(cid)
        return (
            ComparisonSpec.model_validate_json(spec),
            json.loads(evidence),
            {name.decode(): data for name, data in states.items()},
        )

    async def applied_rows(self, cid: str, applied: int) -> list[Rows]:
        """The rows of the first ``applied`` chunks, one ``Rows`` per chunk."""
        if applied <= 0:
            return []
        blocks = await self.client.lrange(self.keys(cid).blocks, 0, applied - 1)
        return [decode_block(block) for block in blocks]

    async def chunks(self, cid: str, applied: int, page: int = 64) -> AsyncIterator[
            tuple[int, bytes]]:
        """``(sequence, block)`` of every chunk stored or queued: the ``applied`` blocks, then
        the stream (queued, pending or halted), then blocks applied meanwhile; a chunk applied
        while it is read may come twice, none is missed."""
        keys = self.keys(cid)
        for start in range(0, applied, page):
            blocks = await self.client.lrange(keys.blocks, start, min(start + page, applied) - 1)
            for offset, block in enumerate(blocks):
                yield start + offset + 1, block
        seen: set[int] = set()
        after = "-"
        while True:
            entries = await self.client.xrange(keys.stream, after, "+", count=page)
            for _, fields in entries:
                sequence = int(fields[b"sequence"])
                seen.add(sequence)
                if sequence > applied:
                    yield sequence, fields[b"block"]
            if len(entries) < page:
                break
            after = "(" + entries[-1][0].decode()
        now = int(await self.client.hget(keys.meta, "sequence") or applied)
        for sequence in range(applied + 1, now + 1):
            if sequence not in seen:
                yield sequence, await self.client.lindex(keys.blocks, sequence - 1)

    async def delete(self, cid: str, request: str) -> None:
        """Remove every key of the comparison: meta first, so nothing else touches it after
        (``request``: the identity that makes a re-sent delete answer as the first did)."""
        keys = self.keys(cid)
        deleted = await resend_on_lost_reply(lambda: self._delete(
            keys=[keys.meta, keys.receipt(request)], args=[RECEIPT_TTL_MS]), "delete")
        if not deleted:
            raise NotFound(cid)
        await self._remove(cid)
        await self.client.publish(keys.updates, json.dumps({"id": cid, "deleted": True}))

    async def _remove(self, cid: str) -> None:
        keys = self.keys(cid)
        await self.client.delete(keys.meta)
        await self.client.srem(index_key(self.prefix), cid)
        await self.client.zrem(created_key(self.prefix), cid)
        batch: list[bytes] = []
        async for key in self.client.scan_iter(match=keys.pattern, count=500):
            batch.append(key)
            if len(batch) >= 500:
                await self.client.delete(*batch)
                batch.clear()
        if batch:
            await self.client.delete(*batch)
        await self.client.execute_command(self._publish, keys.updates,
                                          json.dumps({"id": cid, "deleted": True}))

    async def ingest(
        self, cid: str, block: bytes, rows: int, digest: str, idempotency_key: str | None,
        request: str, models: int | None, max_bytes: int,
    ) -> Ingested:
        """Record and queue a chunk in one step, under the client's ``idempotency_key`` or, when
        it gave none, the request's identity ``request``; unless a model was added since it was
        validated (``models``: ``Meta.models_added`` then; status ``stale``) or the block would
        take the chunk blocks it holds past ``max_bytes`` (status ``full``)."""
        keys = self.keys(cid)
        if idempotency_key is None:
            record, ttl = keys.receipt(request), RECEIPT_TTL_MS
        else:
            record, ttl = keys.idempotency(idempotency_key), self._idempotency_ms
        status, sequence, recorded = await resend_on_lost_reply(lambda: self._ingest(
            keys=[keys.meta, keys.stream, record],
            args=[
                digest,
                block,
                rows,
                ttl,
                work_channel(self.prefix),
                cid,
                -1 if models is None else models,
                bytes.fromhex(digest),
                max_bytes,
            ],
        ), "ingest")
        outcome = status.decode()
        if outcome == "duplicate" and idempotency_key is None:
            outcome = "accepted"  # a re-send found the request's own first run
        return Ingested(outcome, int(sequence), int(recorded) if recorded else None)

    async def add_model(
        self,
        meta: Meta,
        spec: ComparisonSpec,
        progress: ComparisonProgress,
        evidence: dict[str, Any],
        model: ModelSpec,
        state: bytes,
        catching_up: bool,
        request: str,
    ) -> int:
        """Compare-and-set on ``meta.version`` and ``meta.ingested`` (the chunks the model was
        checked against): 1 added (also when the request's identity finds its first run), 0
        stale, -1 gone, -2 name taken."""
        keys = self.keys(spec.id)
        result = await resend_on_lost_reply(lambda: self._add_model(
            keys=[keys.meta, keys.states, keys.evidence, keys.progress, keys.receipt(request)],
            args=[
                *self._spec_change(meta, spec, evidence),
                model.name,
                state,
                work_channel(self.prefix),
                spec.id,
                int(catching_up),
                meta.ingested,
                self._publish,
                encode(progress),
                RECEIPT_TTL_MS,
            ],
        ), "add model")
        return int(result)

    async def remove_model(
        self, meta: Meta, spec: ComparisonSpec, progress: ComparisonProgress,
        evidence: dict[str, Any], name: str, catching_up: bool, request: str,
    ) -> int:
        """Compare-and-set on ``meta.version``: 1 removed (also when the request's identity
        finds its first run), 0 stale, -1 gone, -2 no such model."""
        keys = self.keys(spec.id)
        result = await resend_on_lost_reply(lambda: self._remove_model(
            keys=[keys.meta, keys.states, keys.evidence, keys.progress, keys.receipt(request)],
            args=[*self._spec_change(meta, spec, evidence), name, int(catching_up),
                  self._publish, encode(progress), RECEIPT_TTL_MS],
        ), "remove model")
        return int(result)

    def _spec_change(self, meta: Meta, spec: ComparisonSpec,
                     evidence: dict[str, Any]) -> list[Any]:
        """The leading arguments of a script that changes the spec: the version it expects,
        the new spec, the new evidence and the channel that evidence is published on."""
        return [meta.version, spec.model_dump_json(), json.dumps(evidence, allow_nan=False),
                self.keys(spec.id).updates]

    async def exported(self, limit: int) -> list[Exported]:
        """What /metrics shows of the ``limit`` newest comparisons (service/store/exported.py)."""
        return await exported(self.client, self.prefix, limit)

    async def queue_depths(self) -> dict[str, int]:
        ids = await self.ids()
        pipe = self.client.pipeline(transaction=False)
        for cid in ids:
            pipe.hmget(self.keys(cid).meta, "sequence", "next_seq")
        depths = {}
        for cid, (sequence, ingested) in zip(ids, await pipe.execute() if ids else [],
                                             strict=True):
            if sequence is not None and ingested is not None:
                depths[cid] = int(ingested) - int(sequence)
        return depths
