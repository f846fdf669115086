"""Dead-lettered chunks of a comparison (API side): list them, resume a halted comparison."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

from modelcompare.service.evidence import evidence_body
from modelcompare.service.progress import encode
from modelcompare.service.reducers import next_version, resumed
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store import scripts
from modelcompare.service.store.codec import decode_block
from modelcompare.service.store.comparisons import RECEIPT_TTL_MS, NotFound
from modelcompare.service.store.connection import AsyncClient, publish_command
from modelcompare.service.store.keys import Keys, work_channel
from modelcompare.service.store.progress import read_progress
from modelcompare.service.store.resend import resend_on_lost_reply

ResumeAction = Literal["retry", "skip"]


class NotHalted(Exception):
    """The comparison is not halted (or was resumed meanwhile)."""


@dataclass(frozen=True)
class DeadLetterRecord:
    id: str
    sequence: int
    rows: int
    error: str
    attempts: int
    action: str  # "halted" | "skipped"
    time: float


class DeadLetters:
    def __init__(self, client: AsyncClient, prefix: str) -> None:
        self.client = client
        self._publish = publish_command(client)
        self.prefix = prefix
        self._resume = client.register_script(scripts.RESUME)

    async def halted_at(self, cid: str) -> int | None:
        """The sequence processing is halted on; None when running. ``NotFound`` if unknown."""
        exists, halted = await self.client.hmget(Keys(self.prefix, cid).meta, "version", "halted")
        if exists is None:
            raise NotFound(cid)
        return None if halted is None else int(halted)

    async def list(self, cid: str, limit: int) -> list[DeadLetterRecord]:
        """The oldest ``limit`` dead letters, in the order they were given up on."""
        entries = await self.client.xrange(Keys(self.prefix, cid).dead_letters, count=limit)
        return [
            DeadLetterRecord(
                id=entry_id.decode(),
                sequence=int(fields[b"sequence"]),
                rows=decode_block(fields[b"block"]).count,
                error=fields[b"error"].decode(),
                attempts=int(fields[b"attempts"]),
                action=fields[b"action"].decode(),
                time=float(fields[b"time"]),
            )
            for entry_id, fields in entries
        ]

    async def resume(self, cid: str, action: ResumeAction, request: str) -> dict[str, Any]:
        """Un-halt: the worker retries the halted chunk (``retry``) or commits it as an empty
        block (``skip``). Returns the new evidence body; ``NotHalted`` when not halted.
        ``request``: the identity that makes a re-send after a lost reply a no-op."""
        keys = Keys(self.prefix, cid)
        for _ in range(20):
            spec, version, halted = await self.client.hmget(keys.meta, "spec", "version",
                                                            "halted")
            progress = await read_progress(self.client, keys)
            if spec is None or progress is None:
                raise NotFound(cid)
            if halted is None:
                raise NotHalted(cid)
            if progress.version != int(version):
                continue
            skipped = progress.skipped_chunks
            if action == "skip":
                reason: str | None = f"chunk {int(halted)} is skipped on the operator's request"
            elif skipped:
                reason = f"{skipped} chunk(s) dead-lettered and skipped, their rows left out"
            else:
                reason = None
            progress = next_version(resumed(progress, reason))
            body = evidence_body(ComparisonSpec.model_validate_json(spec), progress)
            result = await resend_on_lost_reply(functools.partial(
                self._resume,
                keys=[keys.meta, keys.evidence, keys.attempts, keys.progress,
                      keys.receipt(request)],
                args=[int(version), halted, action, json.dumps(body, allow_nan=False),
                      reason or "", keys.updates, work_channel(self.prefix), cid, self._publish,
                      encode(progress), RECEIPT_TTL_MS],
            ), "resume")
            if result == 1:
                return body
            if result == -1:
                raise NotFound(cid)
            if result == -2:
                raise NotHalted(cid)
        raise TimeoutError(f"comparison {cid} kept changing")
