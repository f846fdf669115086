"""Webhooks of decision rules through a real server, a real worker process's sender, real Redis
and a real HTTP receiver: one signed delivery per event, with the event's id; retries after
failures; dead deliveries listed and replayed; refused targets get a 422 and change nothing; a
receiver that hangs does not hold the chunks back; a full outbox gives new deliveries up."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from service_helpers import assert_error, comparison_body
from service_server import StartServer, create_and_ingest
from webhook_receiver import Receiver

from modelcompare.service.store.keys import Keys
from modelcompare.service.webhooks.signing import verify

AHEAD = {"name": "ahead", "when": {"log_bayes_factor": {
    "model": "right", "against": "wrong_noise", "above": 0.0}}}  # fires on chunk 1 (exact)
LOCAL = {"webhook_allowed_networks": ["127.0.0.1/32"], "webhook_backoff": 0.05,
         "webhook_backoff_max": 0.2}


def wait_until(condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


def deliveries(client: httpx.Client, cid: str, state: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/comparisons/{cid}/deliveries", params={"state": state})
    assert response.status_code == 200, response.text
    return list(response.json()["deliveries"])


def settled(client: httpx.Client, cid: str) -> bool:
    return not deliveries(client, cid, "pending")


def test_an_event_is_delivered_once_signed_under_its_id(start_server: StartServer) -> None:
    with Receiver() as receiver:
        server = start_server("local", **LOCAL)
        with server.client() as client:
            body = {**comparison_body("exact"), "rules": [{**AHEAD, "webhook": receiver.url}]}
            cid = create_and_ingest(client, body, 60, 20)
            wait_until(lambda: receiver.received and settled(client, cid))
            (event,) = client.get(f"/v1/comparisons/{cid}/events").json()["events"]
            secret = client.get(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"]
            assert client.get(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"] == secret
            rules = client.get(f"/v1/comparisons/{cid}/rules").json()["rules"]
            counted = 'modelcompare_webhook_deliveries_total{outcome="delivered"} 1.0'
            wait_until(lambda: counted in client.get("/metrics").text)  # counted after settling
        time.sleep(1.0)  # nothing more comes
    (delivery,) = receiver.received
    assert rules[0]["webhook"] == receiver.url
    assert delivery.headers["Modelcompare-Event-Id"] == event["id"] == f"{cid}:1:ahead"
    assert delivery.headers["Idempotency-Key"] == event["id"]
    assert delivery.headers["Modelcompare-Delivery-Attempt"] == "1"
    assert json.loads(delivery.body) == {"type": "event", "event": event}
    assert verify(secret, delivery.headers["Modelcompare-Signature"], delivery.body)
    assert not verify(secret, delivery.headers["Modelcompare-Signature"], delivery.body + b" ")
    store = server.redis()
    assert store.hget(Keys(server.settings.key_prefix, cid).meta, "deliveries") == b"1"


def test_failed_tries_are_retried_then_dead_then_replayed(start_server: StartServer) -> None:
    with Receiver(statuses=[500, 503, 502]) as receiver:
        server = start_server("local", webhook_max_attempts=2, **LOCAL)
        with server.client() as client:
            body = {**comparison_body("exact"), "rules": [{**AHEAD, "webhook": receiver.url}]}
            cid = create_and_ingest(client, body, 20, 20)
            (dead,) = wait_until(lambda: deliveries(client, cid, "dead"))
            assert (dead["id"], dead["attempts"], dead["last_status"]) == (
                f"{cid}:1:ahead", 2, 503)
            assert dead["last_error"] == "HTTP 503" and dead["next_attempt"] is None
            assert settled(client, cid)
            replayed = client.post(f"/v1/comparisons/{cid}/deliveries/{dead['id']}/replay")
            assert replayed.status_code == 200, replayed.text
            assert (replayed.json()["attempts"], replayed.json()["dead_at"]) == (0, None)
            # the third try fails (502), the fourth is delivered
            wait_until(lambda: len(receiver.received) == 4 and settled(client, cid))
            assert deliveries(client, cid, "dead") == []
            for outcome, count in (("delivered", 1), ("retry", 2), ("dead", 1)):
                line = f'modelcompare_webhook_deliveries_total{{outcome="{outcome}"}} {count}.0'
                wait_until(lambda line=line: line in client.get("/metrics").text)
            again = client.post(f"/v1/comparisons/{cid}/deliveries/{dead['id']}/replay")
            assert_error(again, 404, "not_found")
    attempts = [d.headers["Modelcompare-Delivery-Attempt"] for d in receiver.received]
    assert attempts == ["1", "2", "1", "2"]
    assert {d.headers["Modelcompare-Event-Id"] for d in receiver.received} == {dead["id"]}


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data",
                                 "http://10.0.0.1/hook", "http://localhost:9/hook",
                                 "http://[::ffff:192.168.0.1]/hook", "file:///etc/passwd"])
def test_a_webhook_to_a_disallowed_address_is_refused(start_server: StartServer,
                                                      url: str) -> None:
    server = start_server("local")
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        response = client.post(f"/v1/comparisons/{cid}/rules", json={**AHEAD, "webhook": url})
        assert_error(response, 422)
        assert "webhook" in response.text
        assert client.get(f"/v1/comparisons/{cid}/rules").json()["rules"] == []
        listed = client.get("/v1/comparisons").json()["comparisons"]
        created = client.post("/v1/comparisons", json={
            **comparison_body("exact"), "rules": [{**AHEAD, "webhook": url}]})
        assert_error(created, 422)
        assert client.get("/v1/comparisons").json()["comparisons"] == listed


def test_a_hanging_receiver_does_not_hold_the_chunks_back(start_server: StartServer) -> None:
    with Receiver() as receiver:
        receiver.release.clear()
        server = start_server("local", webhook_timeout=30.0, **LOCAL)
        with server.client() as client:
            body = {**comparison_body("exact"), "rules": [{**AHEAD, "webhook": receiver.url}]}
            cid = create_and_ingest(client, body, 100, 10)
            wait_until(lambda: receiver.received)
            evidence = wait_until(lambda: (e := client.get(
                f"/v1/comparisons/{cid}/evidence").json())["sequence"] == 10 and e)
            assert evidence["n_observations"] == 100
            assert len(receiver.received) == 1 and not settled(client, cid)  # still hanging
            receiver.release.set()
            wait_until(lambda: settled(client, cid))


def test_past_the_outbox_cap_a_new_delivery_is_dead_at_once(start_server: StartServer) -> None:
    with Receiver() as receiver:
        receiver.release.clear()
        server = start_server("local", webhook_outbox_max=1, **LOCAL)
        rules = [{**AHEAD, "webhook": receiver.url},
                 {**AHEAD, "name": "also", "webhook": receiver.url}]
        with server.client() as client:
            cid = create_and_ingest(client, {**comparison_body("exact"), "rules": rules}, 20, 20)
            (dead,) = wait_until(lambda: deliveries(client, cid, "dead"))
            assert dead["attempts"] == 1 and "MODELCOMPARE_WEBHOOK_OUTBOX_MAX" in dead["last_error"]
            receiver.release.set()
            wait_until(lambda: settled(client, cid))
    assert len(receiver.received) == 1


def test_the_secret_rotates(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        first = client.get(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"]
        rotated = client.post(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"]
        assert rotated != first and rotated.startswith("whsec_")
        assert client.get(f"/v1/comparisons/{cid}/webhook-secret").json()["secret"] == rotated
        assert_error(client.get("/v1/comparisons/0123abcd/webhook-secret"), 404, "not_found")
        assert_error(client.post("/v1/comparisons/0123abcd/webhook-secret"), 404, "not_found")
