"""Idempotency-Key: a retried request returns the original answer and ingests once."""

from __future__ import annotations

from service_helpers import assert_error, by_name, chunks, comparison_body, regression_data
from service_server import Server

from modelcompare.service.store.keys import Keys


def test_retry_with_the_same_key_ingests_once(server: Server) -> None:
    x, y = regression_data(60)
    first, second = chunks(x, y, 30)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        headers = {"Idempotency-Key": "chunk-1"}
        original = client.post(f"/v1/comparisons/{cid}/chunks", json=first, headers=headers)
        assert original.status_code == 202
        assert original.json() == {"sequence": 1, "rows": 30, "duplicate": False}
        for _ in range(3):
            retry = client.post(f"/v1/comparisons/{cid}/chunks", json=first, headers=headers)
            assert retry.status_code == 202
            assert retry.json() == {"sequence": 1, "rows": 30, "duplicate": True}
        waited = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=first,
                             headers=headers)
        assert waited.status_code == 200 and waited.json()["sequence"] == 1
        assert waited.json()["duplicate"] is True  # ?wait=true says so too
        conflict = client.post(f"/v1/comparisons/{cid}/chunks", json=second, headers=headers)
        assert_error(conflict, 409, "idempotency_conflict")
        # the 409 says what the key holds: the CLI resumes a file cut differently from it
        assert conflict.json()["error"]["details"] == {"idempotency_key": "chunk-1",
                                                       "sequence": 1, "rows": 30}
        done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=second,
                           headers={"Idempotency-Key": "chunk-2"})
        evidence = done.json()
        assert evidence["sequence"] == 2 and evidence["n_observations"] == 60
        assert evidence["duplicate"] is False
        assert all(m["n_observations"] == 60 for m in by_name(evidence).values())
        described = client.get(f"/v1/comparisons/{cid}").json()
        assert described["ingested"] == 2
        assert server.redis().llen(Keys(server.settings.key_prefix, cid).blocks) == 2


def test_same_key_on_another_comparison_is_independent(server: Server) -> None:
    x, y = regression_data(10)
    (body,) = chunks(x, y, 10)
    with server.client() as client:
        a = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        b = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        headers = {"Idempotency-Key": "shared"}
        assert client.post(f"/v1/comparisons/{a}/chunks", json=body,
                           headers=headers).json()["duplicate"] is False
        assert client.post(f"/v1/comparisons/{b}/chunks", json=body,
                           headers=headers).json()["duplicate"] is False
