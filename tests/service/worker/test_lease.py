"""Leases: re-entrant for their holder, kept alive by the heartbeat past their TTL while the
holder works, lost by a holder that stalls, released on the way out, never taken on a deleted
comparison."""

from __future__ import annotations

import time

import pytest
from service_server import StartServer

from modelcompare.service.lease import held
from modelcompare.service.store.keys import Keys
from modelcompare.service.store.queue import Queue


@pytest.mark.slow
def test_a_lease_is_reentrant_renewed_and_released(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    mine, other = Queue(store, prefix, "mine"), Queue(store, prefix, "other")
    lease_key = Keys(prefix, "c1").lease
    store.hset(Keys(prefix, "c1").meta, "sequence", 0)  # the comparison exists
    assert mine.acquire("c1", 5.0) and mine.acquire("c1", 5.0)  # again: still ours
    assert not other.acquire("c1", 5.0)
    assert store.get(lease_key) == b"mine"
    mine.release("c1")
    with held(other, "c1", 0.3) as lease:
        assert lease is not None
        time.sleep(1.0)  # over three times the TTL: the heartbeat kept it
        assert store.get(lease_key) == b"other" and not lease.lost.is_set()
        with held(mine, "c1", 0.3) as refused:
            assert refused is None
    assert store.get(lease_key) is None


def test_a_stalled_holder_finds_its_lease_lost(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    mine, other = Queue(store, prefix, "mine"), Queue(store, prefix, "other")
    store.hset(Keys(prefix, "c1").meta, "sequence", 0)
    with held(mine, "c1", 0.3) as lease:
        assert lease is not None
        store.delete(Keys(prefix, "c1").lease)  # as if it had expired during a long pause
        assert other.acquire("c1", 5.0)
        assert lease.lost.wait(1.0)
    assert store.get(Keys(prefix, "c1").lease) == b"other"  # not released by the loser


def test_no_lease_is_taken_on_a_comparison_that_is_gone(start_server: StartServer) -> None:
    """A worker that found work just before the comparison was deleted takes no lease: one
    taken after the delete swept the comparison's keys would be left behind."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    with held(Queue(store, prefix, "mine"), "deleted", 5.0) as lease:
        assert lease is None
        assert store.get(Keys(prefix, "deleted").lease) is None
