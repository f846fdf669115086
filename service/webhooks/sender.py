"""The webhook sender of a worker process: a thread of its own, so that a slow or dead receiver
never holds a chunk's update, and at most ``webhook_concurrency`` requests at once.

Each pass it reads the hint (comparisons with deliveries due), claims their due deliveries for a
lease longer than any try can last, and hands each to a request thread, which checks the target
again (service/webhooks/targets.py), POSTs the signed body to the address it checked, and
settles the try: delivered (a 2xx answer), due again after a backoff, or dead after
``webhook_max_attempts`` tries. A sender that dies mid-try leaves its deliveries claimed until
the lease ends; then any sender takes them: a delivery may arrive twice (at least once), always
with the same event id. Every ``work_sweep_interval`` seconds the sender also sweeps every
comparison's outbox into the hint (a worker killed between a commit and its hint).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time

import httpx
import redis

from modelcompare.service.core.config import Settings
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.connection import SyncClient
from modelcompare.service.store.outbox import Outbox
from modelcompare.service.webhooks.deliveries import DeliveryRecord, backoff
from modelcompare.service.webhooks.signing import (
    ATTEMPT_HEADER,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    sign,
)
from modelcompare.service.webhooks.targets import TargetRefused, check

log = logging.getLogger("modelcompare.webhooks")

USER_AGENT = "modelcompare-webhooks"


class Answer:
    """How one try went: the status (None when no answer came) and what went wrong."""

    def __init__(self, status: int | None, error: str | None) -> None:
        self.status = status
        self.error = error

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class WebhookSender:
    def __init__(self, client: SyncClient, settings: Settings,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.outbox = Outbox(client, settings.key_prefix)
        self.metrics = metrics
        self.concurrency = settings.webhook_concurrency
        # resolve, connect, send and read each within the timeout, and a margin
        self.lease_ms = int((4 * settings.webhook_timeout + 5.0) * 1000)
        self._http = httpx.Client(
            timeout=httpx.Timeout(settings.webhook_timeout), follow_redirects=False,
            trust_env=False, headers={"User-Agent": USER_AGENT},
            # no connection kept: one is pooled by address, and two hosts (two TLS names) on
            # one address must not share it
            limits=httpx.Limits(max_connections=max(1, self.concurrency),
                                max_keepalive_connections=0))
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._busy = 0  # tries handed to the request threads and not settled yet
        # tries for the request threads; None tells one thread to end
        self._tries: queue.SimpleQueue[tuple[str, DeliveryRecord] | None] = queue.SimpleQueue()
        self._next_sweep = 0.0

    def run(self, stop: threading.Event) -> None:
        """Send until ``stop`` is set; the request threads end once their try is settled. They
        are daemons: a process that exits mid-try does not wait for the receiver; the lease
        brings the delivery back."""
        threads = max(1, self.concurrency)
        for index in range(threads):
            threading.Thread(target=self._request_loop, daemon=True,
                             name=f"modelcompare-webhook-{index}").start()
        failures = 0  # passes in a row that Redis failed: the next one waits longer
        while not stop.is_set():
            try:
                self.pass_once()
                failures = 0
            except redis.RedisError as exc:
                (log.warning if failures == 0 else log.debug)(
                    "webhook sender: Redis failed (%s); trying again", exc)
                failures += 1
                self._next_sweep = 0.0
            stop.wait(min(self.settings.failure_backoff_max,
                          self.settings.poll_interval * 2.0 ** min(failures, 20)))
        for _ in range(threads):
            self._tries.put(None)

    def _request_loop(self) -> None:
        while (item := self._tries.get()) is not None:
            self._try(*item)

    def pass_once(self) -> int:
        """Claim what is due, as far as free request threads allow; deliveries handed out."""
        if time.monotonic() >= self._next_sweep:
            self.outbox.sweep()
            self._next_sweep = time.monotonic() + self.settings.work_sweep_interval
        handed = 0
        with self._lock:
            free = self.concurrency - self._busy
        now_ms = int(time.time() * 1000)
        for cid, seen in self.outbox.due(now_ms, max(free, 1)) if free else []:
            claimed = self.outbox.claim(cid, seen, now_ms, self.lease_ms, free - handed)
            with self._lock:
                self._busy += len(claimed.deliveries)
            for record in claimed.deliveries:
                self._tries.put((claimed.secret, record))
            handed += len(claimed.deliveries)
            if handed >= free:
                break
        return handed

    def _try(self, secret: str, record: DeliveryRecord) -> None:
        try:
            answer = self.post(secret, record)
            self._settle(record, answer)
        except Exception:  # a request thread must not die: the lease brings the delivery back
            log.exception("webhook delivery %s: settling the try failed", record.id)
        finally:
            with self._lock:
                self._busy -= 1

    def post(self, secret: str, record: DeliveryRecord) -> Answer:
        """One signed POST of the record's body to the checked address of its URL."""
        try:
            target = check(record.url, self.settings.webhook_allowlist)
        except TargetRefused as exc:
            return Answer(None, f"refused: {exc}")
        body = record.body.encode()
        headers = {"Content-Type": "application/json", "Host": target.host_header,
                   SIGNATURE_HEADER: sign(secret, body), EVENT_ID_HEADER: record.id,
                   "Idempotency-Key": record.id, ATTEMPT_HEADER: str(record.attempts + 1)}
        deadline = time.monotonic() + 4 * self.settings.webhook_timeout
        try:
            request = self._http.build_request(
                "POST", target.pinned_url, content=body, headers=headers,
                extensions={"sni_hostname": target.parts.hostname})
            response = self._http.send(request, stream=True)
            try:
                read = 0
                for piece in response.iter_raw():
                    read += len(piece)
                    if (read > self.settings.webhook_max_response_bytes
                            or time.monotonic() > deadline):
                        break
            finally:
                response.close()
        except httpx.HTTPError as exc:
            return Answer(None, f"{type(exc).__name__}: {exc}")
        error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        return Answer(response.status_code, error)

    def _settle(self, record: DeliveryRecord, answer: Answer) -> None:
        now = time.time()
        now_ms = int(now * 1000)
        if answer.delivered:
            outcome, after = "delivered", record
        else:
            tries = record.attempts + 1
            retry_in = None if tries >= self.settings.webhook_max_attempts else backoff(
                tries, self.settings.webhook_backoff, self.settings.webhook_backoff_max,
                self._rng)
            after = record.failed(now, answer.status, answer.error or "", retry_in)
            outcome = "dead" if retry_in is None else "retry"
            log.log(logging.WARNING if retry_in is None else logging.INFO,
                    "webhook delivery %s to %s failed (try %d): %s; %s", record.id, record.url,
                    tries, answer.error,
                    "dead" if retry_in is None else f"again in {retry_in:.1f} s")
        due_ms = now_ms if after.next_attempt is None else int(after.next_attempt * 1000)
        self.outbox.settle(after, outcome, due_ms, self.settings.dead_deliveries_kept, now_ms)
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels(outcome).inc()
