"""Readiness: whether Redis can serve the API now. On one node, whether it answers; on a Redis
Cluster, whether every slot is served (a master down without a replica to take over, or one
suspected down, leaves its comparisons unreadable and unwritable)."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from modelcompare.service.store.connection import AsyncClient, AsyncRedisCluster, is_cluster


class Unreachable(Exception):
    """Redis did not answer; the message says why."""


class ClusterDegraded(Exception):
    """The Redis Cluster answers, but does not serve every slot; the message says why."""


class Readiness:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def check(self) -> None:
        """Return when Redis can serve every comparison; else ``Unreachable`` or
        ``ClusterDegraded``."""
        problem = None
        try:
            if is_cluster(self._client):
                problem = await cluster_problem(self._client)  # type: ignore[arg-type]
            else:
                await self._client.ping()
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
            raise Unreachable(str(exc)) from exc
        if problem is not None:
            raise ClusterDegraded(problem)


HASH_SLOTS = 16384
# a node that answers slowly, or a pool with no connection free: busy, not down
BUSY = (TimeoutError, redis.exceptions.TimeoutError, redis.exceptions.MaxConnectionsError)


async def cluster_problem(client: AsyncRedisCluster, timeout: float = 2.0) -> str | None:
    """Why the cluster cannot serve every comparison now, or None when it can. Every master
    the client knows is pinged, and the first node that answers (masters first) gives its view
    of the cluster. Not ready while a master holding slots does not answer, or is suspected
    (``fail?``) or marked (``fail``) down: its comparisons are unavailable until it returns or a
    replica takes over; nor while ``cluster_state`` is not ``ok`` or some slot is not served
    (``cluster_slots_ok`` below 16384)."""
    errors = (TimeoutError, redis.RedisError, redis.exceptions.RedisClusterException, OSError)

    async def ask(node: Any, *command: str) -> Any:
        return await asyncio.wait_for(client.execute_command(*command, target_nodes=node),
                                      timeout)

    nodes = sorted(client.get_nodes(), key=lambda node: node.server_type != "primary")
    primaries = [node for node in nodes if node.server_type == "primary"]
    pings = await asyncio.gather(*(ask(node, "PING") for node in primaries),
                                 return_exceptions=True)
    # refused or reset: down. A ping that only timed out (a busy machine) counts as down only
    # when the cluster's own view says so too (``fail?``), or no node answers at all.
    silent = {node.name for node, pong in zip(primaries, pings, strict=True)
              if isinstance(pong, BaseException) and not isinstance(pong, BUSY)}
    for node in nodes:
        if node.name in silent:
            continue
        # (a node whose ping timed out is asked too: busy, not necessarily down)
        try:
            info = await ask(node, "CLUSTER INFO")
            view = await ask(node, "CLUSTER NODES")
        except errors:
            silent.add(node.name)
            continue
        problems = []
        down = sorted(address.split("@")[0] for address, fields in view.items()
                      if _master_down(fields, address.split("@")[0] in silent))
        if down:
            problems.append("master(s) " + ", ".join(down) + " down or unreachable")
        state, slots_ok = str(info.get("cluster_state")), int(info.get("cluster_slots_ok", 0))
        if state != "ok":
            problems.append(f"cluster_state:{state}")
        if slots_ok < HASH_SLOTS:
            problems.append(f"cluster_slots_ok:{slots_ok} of {HASH_SLOTS}")
        return "; ".join(problems) or None
    return "no Redis Cluster node answers (" + ", ".join(sorted(silent)) + ")"


def _master_down(fields: dict[str, Any], silent: bool) -> bool:
    """A node of ``CLUSTER NODES`` is a master holding slots that is down: suspected or marked
    failed, or not answering us."""
    flags = fields["flags"]
    flags = set(flags.split(",") if isinstance(flags, str) else flags)
    return "master" in flags and bool(fields.get("slots")) and (
        silent or "fail" in flags or "fail?" in flags)
