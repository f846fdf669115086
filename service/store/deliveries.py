"""A comparison's webhook deliveries in Redis (API side): list those waiting and those given up
on, replay a dead one, and read or rotate the secret that signs them."""

from __future__ import annotations

import time
from typing import Literal

from modelcompare.service.store import delivery_scripts as scripts
from modelcompare.service.store.comparisons import RECEIPT_TTL_MS, NotFound
from modelcompare.service.store.connection import AsyncClient
from modelcompare.service.store.keys import Keys, webhooks_due_key
from modelcompare.service.store.resend import resend_on_lost_reply
from modelcompare.service.webhooks.deliveries import DeliveryRecord, decode, encode
from modelcompare.service.webhooks.signing import new_secret

State = Literal["pending", "dead"]
REPLAYED, NO_SUCH_DELIVERY, OUTBOX_FULL = 1, 0, -2


class Deliveries:
    def __init__(self, client: AsyncClient, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._secret = client.register_script(scripts.SECRET)
        self._rotate = client.register_script(scripts.ROTATE_SECRET)
        self._replay = client.register_script(scripts.REPLAY)

    async def list(self, cid: str, state: State, limit: int) -> list[DeliveryRecord]:
        """Up to ``limit`` deliveries: waiting, the soonest due first; or dead, the newest
        first. NotFound when the comparison is gone."""
        keys = Keys(self.prefix, cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(keys.meta)
        if state == "pending":
            pipe.zrange(keys.outbox_due, 0, limit - 1)
        else:
            pipe.zrevrange(keys.dead_delivery_order, 0, limit - 1)
        exists, ids = await pipe.execute()
        if not exists:
            raise NotFound(cid)
        if not ids:
            return []
        found = await self.client.hmget(keys.outbox if state == "pending" else
                                        keys.dead_deliveries, ids)
        return [decode(raw) for raw in found if raw is not None]

    async def dead(self, cid: str, delivery: str) -> DeliveryRecord | None:
        raw = await self.client.hget(Keys(self.prefix, cid).dead_deliveries, delivery)
        return None if raw is None else decode(raw)

    async def replay(self, cid: str, replayed: DeliveryRecord, outbox_max: int,
                     request: str) -> int:
        """Make a dead delivery wait again as ``replayed`` (``DeliveryRecord.replayed``):
        REPLAYED, NO_SUCH_DELIVERY (not dead, or gone) or OUTBOX_FULL."""
        keys = Keys(self.prefix, cid)
        due_ms = int((replayed.next_attempt or time.time()) * 1000)
        result = int(await resend_on_lost_reply(lambda: self._replay(
            keys=[keys.dead_deliveries, keys.dead_delivery_order, keys.outbox, keys.outbox_due,
                  keys.receipt(request)],
            args=[replayed.id, encode(replayed), due_ms, outbox_max, RECEIPT_TTL_MS]),
            "replay delivery"))
        if result == REPLAYED:
            await self.client.zadd(webhooks_due_key(self.prefix), {cid: due_ms})
        return result

    async def secret(self, cid: str) -> str:
        """The comparison's secret, made now if it has none; NotFound when it is gone."""
        found = await self._secret(keys=[Keys(self.prefix, cid).meta], args=[new_secret()])
        if found is None:
            raise NotFound(cid)
        return found.decode() if isinstance(found, bytes) else found

    async def rotate(self, cid: str, request: str) -> str:
        """A new secret for the comparison (deliveries from now on are signed with it)."""
        keys = Keys(self.prefix, cid)
        secret = new_secret()
        result = int(await resend_on_lost_reply(lambda: self._rotate(
            keys=[keys.meta, keys.receipt(request)], args=[secret, RECEIPT_TTL_MS]),
            "rotate webhook secret"))
        if result == -1:
            raise NotFound(cid)
        return secret
