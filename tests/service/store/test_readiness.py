"""``Readiness`` (what /readyz asks): a Redis that answers is ready, one that does not is
``Unreachable`` with the client's reason; ``cluster_problem`` on a fake cluster: every slot
served, or the master that is down (marked, suspected or not answering) named."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from service_server import LOCAL_REDIS, free_port, local_redis_available

from modelcompare.service.store.health import Readiness, Unreachable, cluster_problem


@pytest.mark.skipif(not local_redis_available(), reason="needs Redis at 127.0.0.1:6379")
def test_a_redis_that_answers_is_ready() -> None:
    async def check() -> None:
        client = aioredis.Redis.from_url(LOCAL_REDIS)
        try:
            await Readiness(client).check()
        finally:
            await client.aclose()

    asyncio.run(check())


def test_a_redis_that_does_not_answer_is_unreachable_with_the_reason() -> None:
    async def check() -> None:
        # no retries: redis-py's default backoff would spend seconds on a refused port
        client = aioredis.Redis(port=free_port(), socket_connect_timeout=1,
                                retry=Retry(NoBackoff(), 0))
        try:
            await Readiness(client).check()
        finally:
            await client.aclose()

    with pytest.raises(Unreachable, match="connecting to"):
        asyncio.run(check())


@dataclass(frozen=True)
class Node:
    name: str
    server_type: str


class FakeCluster:
    """Two masters with a replica each; ``refused``: masters whose PING is refused; ``flags``:
    each node's flags in the cluster's view (``CLUSTER NODES``)."""

    def __init__(self, refused: set[str] = frozenset(), flags: dict[str, str] | None = None,
                 slots_ok: int = 16384) -> None:
        self.nodes = [Node("127.0.0.1:7000", "primary"), Node("127.0.0.1:7001", "primary"),
                      Node("127.0.0.1:7002", "replica"), Node("127.0.0.1:7003", "replica")]
        self.refused = refused
        self.flags = flags or {}
        self.slots_ok = slots_ok

    def get_nodes(self) -> list[Node]:
        return self.nodes

    async def execute_command(self, *command: str, target_nodes: Node) -> Any:
        if command == ("PING",):
            if target_nodes.name in self.refused:
                raise redis.ConnectionError("Connection refused")
            return True
        if command == ("CLUSTER INFO",):
            state = "ok" if self.slots_ok == 16384 else "fail"
            return {"cluster_state": state, "cluster_slots_ok": self.slots_ok}
        return {
            f"{node.name}@1{node.name[-4:]}": {
                "flags": self.flags.get(node.name,
                                        "master" if node.server_type == "primary" else "slave"),
                "slots": [["0", "8191"]] if node.server_type == "primary" else [],
            }
            for node in self.nodes
        }


@pytest.mark.parametrize(("cluster", "problem"), [
    (FakeCluster(), None),
    (FakeCluster(flags={"127.0.0.1:7001": "master,fail"}),
     "master(s) 127.0.0.1:7001 down or unreachable"),
    (FakeCluster(flags={"127.0.0.1:7000": "master,fail?"}),
     "master(s) 127.0.0.1:7000 down or unreachable"),
    (FakeCluster(refused={"127.0.0.1:7001"}), "master(s) 127.0.0.1:7001 down or unreachable"),
    (FakeCluster(slots_ok=8192), "cluster_state:fail; cluster_slots_ok:8192 of 16384"),
], ids=["healthy", "marked-failed", "suspected", "refusing", "slots-uncovered"])
def test_the_cluster_problem_names_what_is_not_served(cluster: FakeCluster,
                                                      problem: str | None) -> None:
    assert asyncio.run(cluster_problem(cluster)) == problem  # type: ignore[arg-type]
