"""A worker process: its lanes (service/lanes.py), each a ``Worker`` loop on a thread, and its
webhook sender (service/webhooks/sender.py) on a thread of its own."""

from __future__ import annotations

import math
import threading

from modelcompare.service.core.config import Settings
from modelcompare.service.lanes import lane_settings, lanes_of
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.connection import SyncClient
from modelcompare.service.webhooks.sender import WebhookSender
from modelcompare.service.worker import Worker


class WorkerProcess:
    def __init__(self, client: SyncClient, settings: Settings, consumer: str | None = None,
                 metrics: Metrics | None = None) -> None:
        shared = lane_settings(settings)
        self.workers = [
            Worker(client, shared, None if consumer is None else f"{consumer}.{lane.index}",
                   metrics, lane)
            for lane in lanes_of(settings)
        ]
        first, *others = (worker.work for worker in self.workers)
        first.peers = others  # one periodic sweep per process, offered to every lane
        for finder in others:
            finder.sweep_interval = math.inf
        self.sender = (WebhookSender(client, settings, metrics)
                       if settings.webhook_concurrency else None)

    def run(self, stop: threading.Event) -> None:
        """Serve on every lane until ``stop`` is set; each finishes its update under way."""
        threads = [threading.Thread(target=worker.run, args=(stop,), daemon=True,
                                    name=f"modelcompare-lane-{worker.lane.index}")
                   for worker in self.workers]
        if self.sender is not None:
            threads.append(threading.Thread(target=self.sender.run, args=(stop,), daemon=True,
                                            name="modelcompare-webhooks"))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
