"""The webhook sender's threads: its request threads end with it."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from service_server import LOCAL_REDIS, delete_prefix, local_redis_available

from modelcompare.service.core.config import Settings
from modelcompare.service.store.connection import Connection
from modelcompare.service.webhooks.sender import WebhookSender


def request_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("modelcompare-webhook-")]


def test_the_request_threads_end_when_the_sender_stops() -> None:
    """A process that starts and stops senders (a server restarted in one process) kept four
    idle threads of each, blocked on their queue for good."""
    if not local_redis_available():
        pytest.skip("no Redis at 127.0.0.1:6379")
    prefix = f"mctest-{uuid.uuid4().hex[:10]}"
    settings = Settings(redis_url=LOCAL_REDIS, key_prefix=prefix, poll_interval=0.05,
                        webhook_concurrency=3)
    client = Connection.detect(LOCAL_REDIS).sync_client()
    before = len(request_threads())
    try:
        stop = threading.Event()
        runner = threading.Thread(target=WebhookSender(client, settings).run, args=(stop,))
        runner.start()
        deadline = time.monotonic() + 10
        while len(request_threads()) < before + 3:
            assert time.monotonic() < deadline, "the request threads did not start"
            time.sleep(0.01)
        stop.set()
        runner.join(timeout=10)
        deadline = time.monotonic() + 10
        while len(request_threads()) > before:
            assert time.monotonic() < deadline, "the request threads outlived their sender"
            time.sleep(0.01)
    finally:
        client.close()
        delete_prefix(LOCAL_REDIS, prefix)
