"""Decision rules over HTTP: created with a comparison or added later, listed and removed; bad
rules get a 422 (or 409) and change nothing; on the exact method's closed-form evidence a rule
fires and clears on the very chunks the conjugate oracle says, and its events are paged by
sequence."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from service_helpers import (
    assert_error,
    chunks,
    comparison_body,
    exact_log_evidence,
    regression_data,
    wait_for_sequence,
)
from service_server import Server, StartServer

COLUMNS = {"right": [0, 1, 2], "too_few": [0, 1]}
CONFIGS = {"right": {"dim": 3}, "too_few": {"dim": 2}}
PROMOTE = {"name": "promote", "for_chunks": 2,
           "when": {"log_bayes_factor": {"model": "right", "against": "too_few", "above": 3.0}}}


def oracle_log_bf(x: np.ndarray, y: np.ndarray, size: int, chunks_: int) -> list[float]:
    """log BF(right : too_few) after each chunk, from the closed-form evidence."""
    return [exact_log_evidence(CONFIGS["right"], x[:n], y[:n], COLUMNS["right"])
            - exact_log_evidence(CONFIGS["too_few"], x[:n], y[:n], COLUMNS["too_few"])
            for n in range(size, size * chunks_ + 1, size)]


def expected(held: list[bool], for_chunks: int) -> list[tuple[str, int]]:
    """(kind, sequence) of each event: fired when the condition completes ``for_chunks``
    consecutive chunks, cleared on the first chunk after that it fails."""
    events, streak, firing = [], 0, False
    for sequence, holds in enumerate(held, 1):
        streak = streak + 1 if holds else 0
        if holds and not firing and streak >= for_chunks:
            events.append(("fired", sequence))
            firing = True
        elif not holds and firing:
            events.append(("cleared", sequence))
            firing = False
    return events


def test_a_rule_fires_on_the_chunk_the_closed_form_evidence_crosses(server: Server) -> None:
    x, y = regression_data(200, seed=0)
    x[:, 2] *= 0.3  # a weak third input: the evidence needs several chunks to decide
    size, count = 10, 20
    lbf = oracle_log_bf(x, y, size, count)
    promoted = expected([v > 3.0 for v in lbf], 2)
    behind = expected([v < 0.0 for v in lbf], 1)
    fires = promoted[0][1]
    below = {"name": "behind", "when": {"log_bayes_factor": {
        "model": "right", "against": "too_few", "below": 0.0}}}
    # the scenario tests what it means to: a crossing after some chunks, both ways
    assert behind == [("fired", 1), ("cleared", 2), ("fired", 6), ("cleared", 7)]
    assert promoted == [("fired", 12)] and lbf[10] > 3.0 and lbf[9] <= 3.0
    with server.client() as client:
        body = {**comparison_body("exact"), "rules": [PROMOTE, below]}
        created = client.post("/v1/comparisons", json=body)
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        assert [r["name"] for r in created.json()["rules"]] == ["promote", "behind"]
        assert created.json()["rules"][0]["when"] == PROMOTE["when"]
        for part in chunks(x, y, size):
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=part).status_code == 202
        wait_for_sequence(client, cid, count)
        events = client.get(f"/v1/comparisons/{cid}/events").json()
        assert events["next_after"] is None
        promote = [e for e in events["events"] if e["rule"] == "promote"]
        assert [(e["kind"], e["sequence"]) for e in promote] == promoted
        event = promote[0]
        assert event["id"] == f"{cid}:{fires}:promote"
        assert event["figures"]["value"] == pytest.approx(lbf[fires - 1], rel=1e-9)
        assert event["figures"]["stderr"] == 0.0
        assert event["figures"]["threshold"] == 3.0
        assert event["n_observations"] == fires * size and event["when"] == PROMOTE["when"]
        assert [(e["kind"], e["sequence"]) for e in events["events"]
                if e["rule"] == "behind"] == behind
        rules = client.get(f"/v1/comparisons/{cid}/rules").json()
        assert [(r["name"], r["firing"]) for r in rules["rules"]] == [
            ("promote", promoted[-1][0] == "fired"), ("behind", behind[-1][0] == "fired")]
        page = client.get(f"/v1/comparisons/{cid}/events?limit=1").json()
        assert [e["sequence"] for e in page["events"]] == [1] and page["next_after"] == 1
        rest = client.get(f"/v1/comparisons/{cid}/events?after=1").json()
        assert [e["sequence"] for e in rest["events"]] == sorted(
            s for _, s in promoted + behind if s > 1)


def test_rules_are_added_listed_and_removed(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        version = client.get(f"/v1/comparisons/{cid}").json()["version"]
        added = client.post(f"/v1/comparisons/{cid}/rules", json=PROMOTE)
        assert added.status_code == 201, added.text
        assert added.json()["firing"] is False and added.json()["stderrs"] == 2.0
        best = {"name": "best", "when": {"best_changed": {}}}
        assert client.post(f"/v1/comparisons/{cid}/rules", json=best).status_code == 201
        listed = client.get(f"/v1/comparisons/{cid}/rules").json()
        assert [r["name"] for r in listed["rules"]] == ["promote", "best"]
        assert listed["version"] == version + 2
        assert_error(client.post(f"/v1/comparisons/{cid}/rules", json=PROMOTE), 409, "conflict")
        assert client.delete(f"/v1/comparisons/{cid}/rules/promote").status_code == 204
        assert_error(client.delete(f"/v1/comparisons/{cid}/rules/promote"), 404, "not_found")
        described = client.get(f"/v1/comparisons/{cid}").json()
        assert [r["name"] for r in described["rules"]] == ["best"]
        assert client.get(f"/v1/comparisons/{cid}/events").json() == {"events": [],
                                                                       "next_after": None}
        assert_error(client.get("/v1/comparisons/nope/events"), 404, "not_found")
        assert_error(client.post("/v1/comparisons/nope/rules", json=PROMOTE), 404, "not_found")


def test_a_model_a_rule_names_is_not_removed_until_the_rule_is(embedded_server: Server) -> None:
    with embedded_server.client() as client:
        body = {**comparison_body("exact"), "rules": [PROMOTE]}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        before = client.get(f"/v1/comparisons/{cid}").json()
        refused = client.delete(f"/v1/comparisons/{cid}/models/too_few")
        assert_error(refused, 409, "conflict")
        assert refused.json()["error"]["details"] == {"id": cid, "model": "too_few",
                                                      "rules": ["promote"]}
        assert client.get(f"/v1/comparisons/{cid}").json() == before
        assert client.delete(f"/v1/comparisons/{cid}/models/wrong_noise").is_success
        assert client.delete(f"/v1/comparisons/{cid}/rules/promote").status_code == 204
        assert client.delete(f"/v1/comparisons/{cid}/models/too_few").is_success


def condition(**test: Any) -> dict[str, Any]:
    return {"name": "r", "when": {"log_bayes_factor": {"model": "right", "against": "too_few",
                                                      **test}}}


BAD_RULES = {
    "no threshold": condition(),
    "both thresholds": condition(above=1.0, below=2.0),
    "the same model twice": {"name": "r", "when": {"log_bayes_factor": {
        "model": "right", "against": "right", "above": 1.0}}},
    "two conditions": {"name": "r", "when": {"unreliable": {"model": "right"},
                                             "best_changed": {}}},
    "no condition": {"name": "r", "when": {}},
    "an unknown condition": {"name": "r", "when": {"vibes": {}}},
    "a bad name": {**condition(above=1.0), "name": "a/b"},
    "a long name": {**condition(above=1.0), "name": "r" * 65},
    "for_chunks zero": {**condition(above=1.0), "for_chunks": 0},
    "for_chunks too many": {**condition(above=1.0), "for_chunks": 1001},
    "negative stderrs": {**condition(above=1.0), "stderrs": -1.0},
    "a probability of one": {"name": "r", "when": {"posterior_probability": {
        "model": "right", "above": 1.0}}},
    "a string threshold": condition(above="3"),
    "window of no rows": {"name": "r", "when": {"window_log_bayes_factor": {
        "model": "right", "against": "too_few", "above": 1.0, "rows": 0}}},
}


@pytest.mark.parametrize("rule", BAD_RULES.values(), ids=BAD_RULES.keys())
def test_a_bad_rule_is_refused_and_changes_nothing(embedded_server: Server,
                                                   rule: dict[str, Any]) -> None:
    with embedded_server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        before = client.get(f"/v1/comparisons/{cid}").json()
        assert_error(client.post(f"/v1/comparisons/{cid}/rules", json=rule), 422,
                     "invalid_request")
        assert client.get(f"/v1/comparisons/{cid}").json() == before
        created = client.post("/v1/comparisons",
                              json={**comparison_body("exact"), "rules": [rule]})
        assert_error(created, 422, "invalid_request")


def test_rules_over_the_limits_or_on_unknown_models_are_refused(
        start_server: StartServer) -> None:
    server = start_server("local", max_rules=2, max_rule_window_rows=100)
    window = {"name": "w", "when": {"window_log_bayes_factor": {
        "model": "right", "against": "too_few", "above": 1.0, "rows": 101}}}
    unknown = {"name": "u", "when": {"unreliable": {"model": "ghost"}}}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        found = client.post(f"/v1/comparisons/{cid}/rules", json=window)
        assert_error(found, 422, "limit_exceeded")
        assert found.json()["error"]["details"] == {"limit": "max_rule_window_rows",
                                                    "value": 101, "allowed": 100}
        found = client.post(f"/v1/comparisons/{cid}/rules", json=unknown)
        assert_error(found, 422, "invalid_request")
        assert found.json()["error"]["details"] == {"rule": "u", "models": ["ghost"]}
        for name in ("a", "b"):
            assert client.post(f"/v1/comparisons/{cid}/rules",
                               json={**PROMOTE, "name": name}).status_code == 201
        assert_error(client.post(f"/v1/comparisons/{cid}/rules", json=PROMOTE), 422,
                     "limit_exceeded")
        three = [{**PROMOTE, "name": n} for n in "abc"]
        assert_error(client.post("/v1/comparisons", json={**comparison_body("exact"),
                                                          "rules": three}),
                     422, "limit_exceeded")
        assert_error(client.post("/v1/comparisons", json={**comparison_body("exact"),
                                                          "rules": [unknown]}),
                     422, "invalid_request")
        twice = [PROMOTE, PROMOTE]
        assert_error(client.post("/v1/comparisons", json={**comparison_body("exact"),
                                                          "rules": twice}),
                     422, "invalid_request")
        assert_error(client.get(f"/v1/comparisons/{cid}/events?limit=1001"), 422)
        assert len(client.get("/v1/comparisons").json()["comparisons"]) == 1
