"""A delivery's record: its body is the websocket's event frame; failed tries back off
exponentially, with jitter, up to the cap; the last one makes it dead."""

from __future__ import annotations

import json
import random

from modelcompare.service.events import EventRecord, event_id
from modelcompare.service.rules import When
from modelcompare.service.webhooks.deliveries import backoff, decode, delivery_of, encode

EVENT = EventRecord(
    id=event_id("c1", 3, "promote"), comparison="c1", rule="promote", kind="fired", sequence=3,
    n_observations=300, time=1.5, for_chunks=1, stderrs=2.0, figures={"value": 4.2},
    when=When.model_validate({"log_bayes_factor": {"model": "b", "against": "a",
                                                    "above": 3.0}}))


def test_the_body_is_the_event_frame_and_the_id_is_the_event_id() -> None:
    record = delivery_of(EVENT, "https://example.com/hook", now=10.0)
    assert record.id == "c1:3:promote" and record.next_attempt == 10.0
    assert json.loads(record.body) == {"type": "event", "event": EVENT.public()}
    assert decode(encode(record)) == record
    assert "body" not in record.public()


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    rng = random.Random(0)
    for attempts, full in [(1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (30, 300.0)]:
        delays = [backoff(attempts, 1.0, 300.0, rng) for _ in range(200)]
        assert 0.5 * full <= min(delays) and max(delays) <= full
        assert max(delays) - min(delays) > 0.3 * full  # jittered, not constant


def test_a_failed_try_is_due_again_or_dead() -> None:
    record = delivery_of(EVENT, "https://example.com/hook", now=10.0)
    again = record.failed(20.0, 503, "HTTP 503", 4.0)
    assert (again.attempts, again.next_attempt, again.dead_at) == (1, 24.0, None)
    dead = again.failed(30.0, None, "ConnectTimeout: x" * 100, None)
    assert (dead.attempts, dead.next_attempt, dead.dead_at) == (2, None, 30.0)
    assert len(dead.last_error or "") == 500
    replayed = dead.replayed(40.0)
    assert (replayed.attempts, replayed.next_attempt, replayed.dead_at) == (0, 40.0, None)
