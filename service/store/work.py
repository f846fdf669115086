"""How a worker finds work, on one node or across a cluster's shards, without scanning keys.

The comparison index (one set) names every comparison; one pipelined read of each comparison's
progress fields tells which have chunks waiting. A cluster pipeline sends those reads grouped by
node, so a poll costs one round trip to the index's node and one to each master, whatever the
number of keys. Between polls a worker sleeps on the work channel, which ingest publishes to with
a plain ``PUBLISH`` (a cluster delivers it on every node).
"""

from __future__ import annotations

import logging

import redis

from service.store.connection import SyncClient
from service.store.keys import Keys, index_key, work_channel

log = logging.getLogger("modelcompare.work")


class WorkFinder:
    def __init__(self, client: SyncClient, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._pubsub: redis.client.PubSub | None = None

    def comparison_ids(self) -> list[str]:
        return sorted(m.decode() for m in self._client.smembers(index_key(self._prefix)))

    def ready(self) -> list[str]:
        """Ids of the comparisons with chunks to apply or models catching up (not halted)."""
        ids = self.comparison_ids()
        pipe = self._client.pipeline(transaction=False)
        for cid in ids:
            pipe.hmget(Keys(self._prefix, cid).meta, "sequence", "next_seq", "catching_up",
                       "halted")
        return [cid for cid, fields in zip(ids, pipe.execute(), strict=True) if has_work(*fields)]

    def wait(self, timeout: float) -> None:
        """Sleep until ingest signals new work or ``timeout`` seconds pass. A lost connection
        (e.g. the node it listened on failed over) is dropped here and opened anew next time."""
        try:
            if self._pubsub is None:
                self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                self._pubsub.subscribe(work_channel(self._prefix))
            self._pubsub.get_message(timeout=timeout)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.close()
            raise

    def close(self) -> None:
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            try:
                pubsub.close()
            except (redis.RedisError, OSError) as exc:
                log.debug("closing the work subscription: %s", exc)


def has_work(sequence: bytes | None, ingested: bytes | None, catching: bytes | None,
             halted: bytes | None) -> bool:
    if sequence is None or ingested is None or halted is not None:
        return False
    return int(ingested) > int(sequence) or int(catching or 0) > 0
