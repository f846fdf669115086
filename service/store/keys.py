"""Redis key names. Every key of one comparison shares the hash tag ``{cmp:<id>}``."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "workers"  # the consumer group of every comparison's chunk stream


@dataclass(frozen=True)
class Keys:
    prefix: str
    cid: str

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{{cmp:{self.cid}}}:{name}"

    @property
    def meta(self) -> str:
        # hash: spec, models (how many were ever in the spec: created plus added), version,
        # sequence (applied), next_seq (ingested), catching_up, events (decision events ever
        # stored: service/events.py), webhook_secret (service/webhooks/signing.py, made when
        # first needed), deliveries (webhook deliveries made); while halted on a dead-lettered
        # chunk: halted (its sequence); skip (a sequence the operator let go);
        # status_reason ('' when the status is ok)
        return self._key("meta")

    @property
    def states(self) -> str:  # hash: model name -> safetensors bytes
        return self._key("states")

    @property
    def evidence(self) -> str:
        # string: the evidence body (JSON) at the current version, for readers: a projection of
        # the progress record (service/evidence.py), never read back by a worker
        return self._key("evidence")

    @property
    def progress(self) -> str:
        # string: the progress record (JSON, service/progress.py) at the current version, what
        # the worker carries from step to step; written beside the states and the evidence body
        # by the same scripts (absent for comparisons stored before it existed:
        # service/migration.py)
        return self._key("progress")

    @property
    def events(self) -> str:  # hash: event id -> the event (JSON, service/events.py)
        return self._key("events")

    @property
    def event_order(self) -> str:  # sorted set: event ids by the sequence of their chunk
        return self._key("eventorder")

    @property
    def outbox(self) -> str:  # hash: delivery id -> webhook delivery waiting (service/webhooks)
        return self._key("outbox")

    @property
    def outbox_due(self) -> str:  # sorted set: waiting delivery ids by when they are due (ms)
        return self._key("outboxdue")

    @property
    def dead_deliveries(self) -> str:  # hash: delivery id -> a delivery given up on
        return self._key("deaddeliveries")

    @property
    def dead_delivery_order(self) -> str:  # sorted set: dead delivery ids by when they died
        return self._key("deaddeliveryorder")

    @property
    def trace(self) -> str:  # list: one JSON entry per applied chunk
        return self._key("trace")

    @property
    def blocks(self) -> str:  # list: one binary row block per applied chunk, index = seq - 1
        return self._key("blocks")

    @property
    def stream(self) -> str:  # stream: chunks waiting for a worker
        return self._key("stream")

    @property
    def dead_letters(self) -> str:  # stream: chunks whose update failed every attempt
        return self._key("deadletters")

    @property
    def attempts(self) -> str:  # hash: sequence -> failed update attempts of that chunk
        return self._key("attempts")

    @property
    def lease(self) -> str:  # string: token of the worker applying this comparison's chunks
        return self._key("lease")

    @property
    def tasks(self) -> str:
        # hash: the model updates of the chunk being applied, shared out among workers:
        # sequence, block, models ('\n'-joined); per model claim:<name> ('<consumer>|<deadline
        # ms>'), then state:<name> and summary:<name>, or error:<name>
        return self._key("tasks")

    @property
    def tasks_done(self) -> str:  # list: names of models whose staged result just landed
        return self._key("tasksdone")

    @property
    def waiting(self) -> str:
        # string (JSON ``meta.Waiting``, with a time to live): why the last worker that looked
        # at the comparison left it alone (service/unavailable.py); an applied commit deletes it
        return self._key("waiting")

    @property
    def updates(self) -> str:  # pub/sub channel: the evidence body after every commit
        return self._key("updates")

    @property
    def pattern(self) -> str:  # SCAN pattern matching every key of the comparison
        return self._key("*")

    def idempotency(self, key: str) -> str:  # string: the chunk a client's key recorded
        return self._key(f"idem:{key}")

    def receipt(self, request: str) -> str:
        """String: proof that the write request with this identity (made by the API) took
        effect. Outside ``pattern`` (the hash tag alone puts it in the comparison's slot), so
        the receipt of a delete outlives the keys it deleted."""
        return f"{self.prefix}:receipt:{{cmp:{self.cid}}}:{request}"


def index_key(prefix: str) -> str:
    """Set of comparison ids (outside any hash tag, written by separate commands): what the
    workers' safety sweep reads. Kept beside ``created_key`` (and read by earlier versions)."""
    return f"{prefix}:comparisons"


def created_key(prefix: str) -> str:
    """Sorted set of comparison ids scored by creation time (seconds): what the paginated
    listing reads, newest first. Outside any hash tag like ``index_key``; comparisons created
    by a version without it are added from ``index_key`` when a listing finds the two differ
    (``modelcompare.service.store.listing.reconcile_index``)."""
    return f"{prefix}:comparisons:created"


def webhooks_due_key(prefix: str) -> str:
    """Sorted set of comparison ids scored by when (ms) a webhook delivery of theirs is due: a
    hint for the senders (service/webhooks/sender.py), written after the commit that made the
    delivery; the senders' sweep restores what a crash between the two left out."""
    return f"{prefix}:webhooks:due"


def work_channel(prefix: str) -> str:
    """Pub/sub channel that wakes workers when a comparison has new work."""
    return f"{prefix}:work"


def updates_pattern(prefix: str) -> str:
    return f"{prefix}:{{cmp:*}}:updates"


def comparison_id_from_channel(channel: str) -> str:
    start = channel.index("{cmp:") + len("{cmp:")
    return channel[start : channel.index("}", start)]
