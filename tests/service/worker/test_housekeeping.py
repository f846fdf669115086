"""Housekeeping: consumers that are gone and own nothing leave the consumer group; one that
still owns a pending entry stays until its entry is claimed."""

from __future__ import annotations

import time

import pytest
from service_helpers import comparison_body
from service_server import Server, StartServer, create_and_ingest, drain, make_worker

from modelcompare.service.store.keys import GROUP, Keys


def consumers(server: Server, keys: Keys) -> set[str]:
    return {c["name"].decode() for c in server.redis().xinfo_consumers(keys.stream, GROUP)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded", "local"])  # Redis 6.2 and the server's
def test_idle_consumers_without_entries_are_removed(start_server: StartServer,
                                                    backend: str) -> None:
    server = start_server(backend, embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    with server.client() as client:
        cid = create_and_ingest(client, comparison_body(), rows=60, size=10)
    keys = Keys(prefix, cid)
    gone, holding = make_worker(server, "gone"), make_worker(server, "holding")
    taken = [entry.id for entry in gone.queue.read(cid, 2)]
    holding.queue.read(cid, 1)
    store.xclaim(keys.stream, GROUP, "keeper", 0, taken)  # what a live worker does
    keeper = make_worker(server, "keeper", housekeeping_interval=1.0, consumer_idle_max=0.2)
    assert consumers(server, keys) == {"gone", "holding", "keeper"}
    time.sleep(0.3)  # "gone" is idle past consumer_idle_max, the interval has not passed
    assert keeper.housekeeping.run_if_due() == 0  # not due yet
    time.sleep(0.8)
    assert keeper.housekeeping.run_if_due() == 1  # "gone"; never the keeper itself
    assert consumers(server, keys) == {"holding", "keeper"}
    store.xautoclaim(keys.stream, GROUP, "keeper", 0, count=10)
    time.sleep(1.1)
    assert keeper.housekeeping.run_if_due() == 1
    assert consumers(server, keys) == {"keeper"}
    drain(keeper, store, keys, 6)
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
