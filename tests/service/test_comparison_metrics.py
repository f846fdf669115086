"""Per-comparison figures on /metrics: the evidence body's numbers exactly, the rules' state and
event counts, for the newest metrics_max_comparisons comparisons only."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_helpers import by_name, chunks, comparison_body, regression_data, wait_for_sequence
from service_server import StartServer

RULE = {"name": "ahead", "when": {"log_bayes_factor": {
    "model": "right", "against": "wrong_noise", "above": 0.0}}}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_carry_the_evidence_of_the_newest_comparisons(
        start_server: StartServer) -> None:
    server = start_server("local", metrics_max_comparisons=1)
    x, y = regression_data(40)
    with server.client() as client:
        older = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        body = {**comparison_body("exact"), "rules": [RULE]}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for part in chunks(x, y, 20):
            client.post(f"/v1/comparisons/{cid}/chunks", json=part)
        evidence = by_name(wait_for_sequence(client, cid, 2))
        found = samples(client.get("/metrics").text)
    best = max(evidence.values(), key=lambda m: m["posterior_probability"])
    for name, model in evidence.items():
        labels = (("comparison", cid), ("model", name))
        assert found[("modelcompare_log_evidence", labels)] == model["log_evidence"]
        assert found[("modelcompare_log_evidence_stderr", labels)] == 0.0
        assert found[("modelcompare_posterior_probability", labels)] == model[
            "posterior_probability"]
        assert found[("modelcompare_log_bayes_factor_vs_best", labels)] == (
            model["log_evidence"] - best["log_evidence"])
        assert found[("modelcompare_window_log_bayes_factor", labels)] == model["window"][
            "log_bayes_factor"]
    assert found[("modelcompare_rule_firing", (("comparison", cid), ("rule", "ahead")))] == 1.0
    assert found[("modelcompare_rule_events_total", (("comparison", cid),))] == 1.0
    assert not [key for key in found if ("comparison", older) in key[1]
                and key[0] != "modelcompare_queue_depth"]


@pytest.mark.slow  # 1,000 comparisons created over HTTP: about 7 s
def test_label_values_stay_under_the_cap_with_a_thousand_comparisons(
        start_server: StartServer) -> None:
    cap = 25
    server = start_server("local", metrics_max_comparisons=cap)
    body = {**comparison_body("exact"), "rules": [RULE]}
    with server.client() as client:
        created = [client.post("/v1/comparisons", json=body).json()["id"] for _ in range(1000)]
        text = client.get("/metrics").text
    found = samples(text)
    labelled = {dict(labels)["comparison"] for _, labels in found if "comparison" in dict(labels)}
    # the newest `cap` for the figures, the deepest `cap` queues (here all empty) for the depth
    assert cap < len(labelled) <= 2 * cap and labelled <= set(created)
    models = len(body["models"])
    figures = [key for key in found if "comparison" in dict(key[1])
               and key[0] != "modelcompare_queue_depth"]
    assert len({dict(key[1])["comparison"] for key in figures}) == cap
    assert len(figures) <= cap * (5 * models + 1 + 1)  # gauges, the rule, its event counter
    assert len([key for key in found if key[0] == "modelcompare_queue_depth"]) == cap
    assert found[("modelcompare_queued_chunks", ())] == 0.0
