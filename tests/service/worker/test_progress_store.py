"""The progress record in Redis: a run commits the evidence the code before it did (less the
internal ``window_checkpoints``), the worker never reads the stored evidence body back, and
comparisons stored before the record existed are migrated from their body once."""

from __future__ import annotations

import json
import math
from typing import Any

from progress_scenario import FIXTURE, LATE, SGAIS, run_scenario
from pydantic import TypeAdapter
from service_helpers import chunks, comparison_body, regression_data
from service_server import StartServer, create_and_ingest, drain, make_worker, states

from modelcompare.service.core.config import Settings
from modelcompare.service.evidence import evidence_body
from modelcompare.service.migration import progress_from_body
from modelcompare.service.progress import ComparisonProgress, decode
from modelcompare.service.schemas import ComparisonIn, ModelIn, comparison_spec, prior_weights
from modelcompare.service.store.keys import Keys


def renamed(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """Info as the estimators name it now (``restarted`` was renamed ``reestimated``)."""
    return None if info is None else {
        ("reestimated" if k == "restarted" else k): v for k, v in info.items()}


def public(body: dict[str, Any]) -> dict[str, Any]:
    """A body of the code before the record, as this code shows it: no checkpoints, Info as
    named now, the reliability fields added since at their defaults (``wide_at``: null); the
    id and the time taken are the run's."""
    models = [{**{k: v for k, v in m.items() if k != "window_checkpoints"},
               "info": renamed(m["info"]),
               "reliability": {"wide_at": None, **m["reliability"]}} for m in body["models"]]
    return {**body, "id": None, "compute_seconds": None, "models": models}


def test_an_old_body_migrates_to_a_record_that_projects_to_the_same_body() -> None:
    old = json.loads(FIXTURE.read_text())
    request = ComparisonIn.model_validate(comparison_body("sgais", seed=7, **SGAIS))
    spec = comparison_spec(request, old["final"]["id"], 0.0, Settings().limits)
    late = TypeAdapter(ModelIn).validate_python(LATE)
    (weight,) = prior_weights([late], [m.prior_weight for m in spec.models])
    spec = spec.model_copy(update={"models": [*spec.models, late.spec(weight, None)]})
    for body in (old["catching_up"], old["final"]):
        progress = progress_from_body(body)
        assert progress.models["late"].checkpoints == tuple(
            tuple(p) for p in body["models"][-1]["window_checkpoints"])
        assert all("restarted" not in (m.info or {}) for m in progress.models.values())
        projected = evidence_body(spec, progress)
        assert public(projected) == public(body)
        assert projected["compute_seconds"] == body["compute_seconds"]


def same(found: Any, captured: Any) -> bool:
    """Equal, floats to 12 significant digits: the fixture was captured on another CPU kind,
    whose float kernels may round the last digit of the engine's results otherwise."""
    if isinstance(found, dict) and isinstance(captured, dict):
        return found.keys() == captured.keys() and all(same(found[k], captured[k])
                                                       for k in found)
    if isinstance(found, list | tuple) and isinstance(captured, list | tuple):
        return len(found) == len(captured) and all(map(same, found, captured))
    if isinstance(found, float) and isinstance(captured, float):
        return math.isclose(found, captured, rel_tol=1e-12)
    return bool(found == captured)


def test_a_run_commits_the_evidence_and_trace_of_the_code_before_the_record(
        start_server: StartServer) -> None:
    old = json.loads(FIXTURE.read_text())
    found = run_scenario(start_server("local", embedded_worker=False))
    for key in ("catching_up", "final"):
        assert all("window_checkpoints" not in m for m in found[key]["models"])
        assert same(public(found[key]), public(old[key])), key

    def timeless(history: dict[str, Any]) -> Any:
        return [{**p, "compute_seconds": None} for p in history["points"]], history["models"]

    assert same(timeless(found["history"]), timeless(old["history"]))


def stored(store: Any, keys: Keys) -> tuple[ComparisonProgress, dict[str, Any]]:
    """The stored record and body, less what differs between twins (id, time taken)."""
    progress = decode(store.get(keys.progress)).model_copy(update={"compute_seconds": None})
    body = json.loads(store.get(keys.evidence))
    return progress, {**body, "id": None, "compute_seconds": None}


def test_the_worker_never_reads_the_stored_evidence_body(start_server: StartServer) -> None:
    """Twin comparisons fed the same chunks: the body of one is corrupted, then deleted,
    between steps; its next commits are the other's. Each step's chunk is posted to both just
    before it, so the worker cannot run one twin ahead of the other (with every chunk queued at
    once, draining the second twin could apply the first one's next chunk)."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    worker = make_worker(server, "alone", batch_chunks=1)
    body = comparison_body("sgais", seed=3, **SGAIS)
    steps = chunks(*regression_data(80), 20)
    with server.client() as client:
        twins = [Keys(prefix, str(client.post("/v1/comparisons", json=body).json()["id"]))
                 for _ in range(2)]
        for sequence, tamper in ((1, None), (2, b"{not json"), (3, None), (4, b"")):
            if tamper is not None:
                store.set(twins[1].evidence, tamper) if tamper else store.delete(twins[1].evidence)
            for keys in twins:
                posted = client.post(f"/v1/comparisons/{keys.cid}/chunks",
                                     json=steps[sequence - 1])
                assert posted.status_code == 202
            for keys in twins:
                drain(worker, store, keys, sequence)
            assert stored(store, twins[0]) == stored(store, twins[1])
    assert states(store, twins[0]) == states(store, twins[1])


def test_a_comparison_stored_before_the_record_is_migrated_once(
        start_server: StartServer) -> None:
    """A twin whose record is replaced by the body the code before it stored (checkpoints in
    the body, Info named as then) continues to the same commits as the other."""
    server = start_server("local", embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    worker = make_worker(server, "alone", batch_chunks=1, evidence_window_rows=30)
    with server.client() as client:
        twins = [Keys(prefix, create_and_ingest(client, comparison_body("sgais", **SGAIS), 100,
                                                20)) for _ in range(2)]
    for keys in twins:
        drain(worker, store, keys, 3)
    progress = decode(store.get(twins[1].progress))
    old = json.loads(store.get(twins[1].evidence))
    for body in old["models"]:
        model = progress.models[body["name"]]
        body["window_checkpoints"] = [list(p) for p in model.checkpoints]
        body["info"] = {("restarted" if k == "reestimated" else k): v
                        for k, v in (model.info or {}).items()}
    store.set(twins[1].evidence, json.dumps(old))
    store.delete(twins[1].progress)
    snap = worker.queue.snapshot(twins[1].cid)
    assert snap is not None
    assert snap.progress.models["right"].checkpoints == progress.models["right"].checkpoints
    assert store.get(twins[1].progress) is None  # migrated in memory; stored at the commit
    for keys in twins:
        drain(worker, store, keys, 5)
    ours, theirs = stored(store, twins[0]), stored(store, twins[1])
    assert public(ours[1]) == public(theirs[1])
    assert ours[0].models["right"].window == theirs[0].models["right"].window
    assert ours[0].models["right"].checkpoints == theirs[0].models["right"].checkpoints
