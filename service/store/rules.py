"""A comparison's decision rules and their events in Redis (API side): change the rules, read
the events a page at a time. The rules live in the spec and their states in the progress
record, so that a change is a compare-and-set on the version like adding a model: a worker's
commit computed before it is stale and is computed again with the new rules."""

from __future__ import annotations

import json
from typing import Any

from modelcompare.service.events import EventRecord, decode
from modelcompare.service.progress import ComparisonProgress, encode
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.comparisons import RECEIPT_TTL_MS, NotFound
from modelcompare.service.store.connection import AsyncClient, publish_command
from modelcompare.service.store.keys import Keys
from modelcompare.service.store.resend import resend_on_lost_reply
from modelcompare.service.store.scripts import with_receipt

# KEYS: meta, evidence, progress, receipt. ARGV: expected version, spec, evidence, progress,
# updates channel, the publish command of the updates channel, receipt ttl ms.
# Returns 1 changed, 0 stale version, -1 comparison gone.
CHANGE_RULES = with_receipt("""
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return -1 end
if tonumber(version) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[4])
redis.call(ARGV[6], ARGV[5], ARGV[3])
return 1
""")


class Rules:
    def __init__(self, client: AsyncClient, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._publish = publish_command(client)
        self._change = client.register_script(CHANGE_RULES)

    async def change(self, version: int, spec: ComparisonSpec, progress: ComparisonProgress,
                     evidence: dict[str, Any], request: str) -> int:
        """Store ``spec`` (its new rules) and ``progress`` (their states) one version past
        ``version``: 1 changed (also when the request's identity finds its first run), 0 stale,
        -1 gone."""
        keys = Keys(self.prefix, spec.id)
        return int(await resend_on_lost_reply(lambda: self._change(
            keys=[keys.meta, keys.evidence, keys.progress, keys.receipt(request)],
            args=[version, spec.model_dump_json(), json.dumps(evidence, allow_nan=False),
                  encode(progress), keys.updates, self._publish, RECEIPT_TTL_MS],
        ), "change rules"))

    async def events(self, cid: str, after: int, limit: int) -> list[EventRecord]:
        """The events of chunks after sequence ``after``, oldest first: at least ``limit`` of
        them when there are, and every event of the last chunk they reach (at most one per
        rule), so that ``after`` = its sequence starts the next page. NotFound when the
        comparison is gone."""
        keys = Keys(self.prefix, cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(keys.meta)
        pipe.zrangebyscore(keys.event_order, f"({after}", "+inf", start=0, num=limit,
                           withscores=True)
        exists, found = await pipe.execute()
        if not exists:
            raise NotFound(cid)
        ids = [member for member, _ in found]
        if len(found) == limit:
            last = int(found[-1][1])
            ids += [member for member in await self.client.zrangebyscore(
                keys.event_order, last, last) if member not in ids]
        if not ids:
            return []
        bodies = await self.client.hmget(keys.events, ids)
        events = [decode(body) for body in bodies if body is not None]
        return sorted(events, key=lambda event: (event.sequence, event.rule))
