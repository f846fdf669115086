"""Compact per-chunk records: an idempotency record is one string, a trace point one JSON array;
records stored in the earlier formats (a hash, a JSON object) still read the same."""

from __future__ import annotations

import json

from service_helpers import chunks, comparison_body, regression_data, wait_for_sequence
from service_server import StartServer

from modelcompare.service.store.codec import block_digest
from modelcompare.service.store.keys import Keys
from modelcompare.service.store.trace import decode_point


def test_records_are_compact_and_old_records_still_read(start_server: StartServer) -> None:
    server = start_server("local")
    store, prefix = server.redis(), server.settings.key_prefix
    x, y = regression_data(60)
    first, second = chunks(x, y, 30)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        keys = Keys(prefix, cid)
        accepted = client.post(f"/v1/comparisons/{cid}/chunks", json=first,
                               headers={"Idempotency-Key": "new"})
        assert accepted.json() == {"sequence": 1, "rows": 30, "duplicate": False}
        record = store.get(keys.idempotency("new"))
        assert record is not None and record.startswith(b"1:30:") and len(record) == 5 + 32
        assert 0 < store.pttl(keys.idempotency("new")) <= 24 * 3600 * 1000
        # a record as earlier versions wrote it: a hash with the hex digest of the parsed rows
        old = client.post(f"/v1/comparisons/{cid}/chunks", json=second).json()
        wait_for_sequence(client, cid, 2)
        digest = block_digest(store.lindex(keys.blocks, 1))
        store.hset(keys.idempotency("old"), mapping={"digest": digest, "sequence": old["sequence"],
                                                      "rows": 30})
        again = client.post(f"/v1/comparisons/{cid}/chunks", json=second,
                            headers={"Idempotency-Key": "old"})
        assert again.json() == {"sequence": 2, "rows": 30, "duplicate": True}
        clash = client.post(f"/v1/comparisons/{cid}/chunks", json=first,
                            headers={"Idempotency-Key": "old"})
        assert clash.status_code == 409
        points = client.get(f"/v1/comparisons/{cid}/history").json()["points"]
        stored = store.lrange(keys.trace, 0, -1)
        assert all(json.loads(raw)[0] == p["sequence"] for raw, p in zip(stored, points,
                                                                           strict=True))
        assert [decode_point(raw) for raw in stored] == points
        store.lset(keys.trace, 0, json.dumps(points[0]))  # a point as an object, as before
        assert client.get(f"/v1/comparisons/{cid}/history").json()["points"] == points
        # an array stored before diverged_fraction and spread were recorded: its five model
        # fields
        sequence, version, n, seconds, models = json.loads(stored[1])
        store.lset(keys.trace, 1, json.dumps([sequence, version, n, seconds,
                                              [row[:6] for row in models]]))
        history = client.get(f"/v1/comparisons/{cid}/history").json()
        assert history["points"][1]["models"]["right"] == {
            **points[1]["models"]["right"], "diverged_fraction": None, "spread": None}
        assert history["models"]["right"]["diverged_fraction"][1] is None
        # one a newer worker wrote with a field added after these (a rolling upgrade)
        sequence, version, n, seconds, models = json.loads(stored[0])
        store.lset(keys.trace, 0, json.dumps([sequence, version, n, seconds,
                                              [[*row, 1.5] for row in models]]))
        later = client.get(f"/v1/comparisons/{cid}/history").json()["points"][0]
        assert later == points[0]
    assert set(points[0]["models"]["right"]) == {"log_evidence", "log_evidence_stderr",
                                                 "n_observations", "ess", "annealing_steps",
                                                 "diverged_fraction", "spread"}
