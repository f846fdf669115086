"""The work queue's per-comparison records: a chunk's failed attempts are counted only while its
comparison exists."""

from __future__ import annotations

from service_server import StartServer

from modelcompare.service.store.keys import Keys
from modelcompare.service.store.queue import Queue


def test_failures_are_counted_per_chunk_and_never_on_a_comparison_that_is_gone(
    start_server: StartServer,
) -> None:
    """Seen in CI: a worker computing a chunk while its comparison was deleted failed (its rows
    were gone) and counted the failure after the delete had swept the comparison's keys, leaving
    its attempts hash behind for good."""
    server = start_server("embedded", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    queue = Queue(store, prefix, "mine")
    store.hset(Keys(prefix, "c1").meta, "sequence", 0)  # the comparison exists
    assert [queue.record_failure("c1", 3), queue.record_failure("c1", 3)] == [1, 2]
    assert queue.record_failure("c1", 4) == 1
    assert queue.record_failure("deleted", 3) is None
    assert store.exists(Keys(prefix, "deleted").attempts) == 0
