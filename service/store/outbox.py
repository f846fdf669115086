"""What a webhook sender does in Redis (synchronous client): find the comparisons with
deliveries due (the hint), claim a comparison's due deliveries, settle each try, and sweep
every comparison's outbox into the hint (service/webhooks/sender.py)."""

from __future__ import annotations

from dataclasses import dataclass

from modelcompare.service.store import delivery_scripts as scripts
from modelcompare.service.store.connection import SyncClient
from modelcompare.service.store.keys import Keys, webhooks_due_key
from modelcompare.service.store.work import index_pages
from modelcompare.service.webhooks.deliveries import DeliveryRecord, decode, encode
from modelcompare.service.webhooks.signing import new_secret


@dataclass(frozen=True)
class Claimed:
    secret: str
    deliveries: list[DeliveryRecord]
    next_due_ms: int | None  # the comparison's earliest due time after the claim


def _ms(raw: bytes | str) -> int | None:
    return None if raw in (b"", "") else int(float(raw))


class Outbox:
    def __init__(self, client: SyncClient, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.hint = webhooks_due_key(prefix)
        self._claim = client.register_script(scripts.CLAIM)
        self._settle = client.register_script(scripts.SETTLE)
        self._rehint = client.register_script(scripts.REHINT)

    def due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """(comparison, hint score) of up to ``limit`` comparisons with deliveries due."""
        found = self.client.zrangebyscore(self.hint, "-inf", now_ms, start=0, num=limit,
                                          withscores=True)
        return [(cid.decode(), int(score)) for cid, score in found]

    def claim(self, cid: str, seen_ms: int, now_ms: int, lease_ms: int, limit: int) -> Claimed:
        """Take up to ``limit`` due deliveries of ``cid`` for ``lease_ms``, and move the hint
        (read as ``seen_ms``) to the comparison's next due time."""
        keys = Keys(self.prefix, cid)
        secret, next_due, *pairs = self._claim(
            keys=[keys.outbox, keys.outbox_due, keys.meta],
            args=[now_ms, lease_ms, limit, new_secret()])
        claimed = Claimed(secret.decode() if isinstance(secret, bytes) else secret,
                          [decode(pairs[i + 1]) for i in range(0, len(pairs), 2)],
                          _ms(next_due))
        self._rehint(keys=[self.hint], args=[
            cid, seen_ms, "" if claimed.next_due_ms is None else claimed.next_due_ms])
        return claimed

    def settle(self, record: DeliveryRecord, outcome: str, due_ms: int, dead_kept: int,
               now_ms: int) -> None:
        """Record a try (outcome delivered, retry or dead) and hint the next due time."""
        keys = Keys(self.prefix, record.comparison)
        next_due = _ms(self._settle(
            keys=[keys.outbox, keys.outbox_due, keys.dead_deliveries, keys.dead_delivery_order,
                  keys.meta],
            args=[record.id, outcome, encode(record), due_ms, dead_kept, now_ms]))
        if next_due is not None:
            self.client.zadd(self.hint, {record.comparison: next_due}, lt=True)

    def sweep(self) -> int:
        """Put every comparison with deliveries waiting in the hint (at its earliest due time,
        or sooner if the hint has it sooner); how many have some."""
        found = 0
        for page in index_pages(self.client, self.prefix):
            pipe = self.client.pipeline(transaction=False)
            for cid in page:
                pipe.zrange(Keys(self.prefix, cid).outbox_due, 0, 0, withscores=True)
            firsts = pipe.execute()
            due = {cid: int(first[0][1]) for cid, first in zip(page, firsts, strict=True)
                   if first}
            if due:
                self.client.zadd(self.hint, due, lt=True)
            found += len(due)
        return found
