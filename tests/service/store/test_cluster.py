"""The service on a real Redis Cluster (3 masters, one replica each, started by the test):
cluster mode detected from one node's URL, comparisons spread over the shards with exact
evidence, sharded pub/sub, exactly-once across a killed worker and across a master failover."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
import yaml
from redis_cluster import LocalCluster
from service_helpers import by_name, chunks, comparison_body, exact_log_evidence, regression_data
from service_server import (
    LOCAL_REDIS,
    RunningServer,
    Server,
    create_and_ingest,
    delete_prefix,
    drain,
    local_redis_available,
    make_worker,
    states,
)

from modelcompare.service.core.config import Settings
from modelcompare.service.store.connection import Connection
from modelcompare.service.store.keys import GROUP, Keys, index_key
from modelcompare.service.store.queue import STALE

COLUMNS = {"right": [0, 1, 2], "too_few": [0, 1], "wrong_noise": [0, 1, 2]}
CONFIGS = {"right": {"dim": 3}, "too_few": {"dim": 2}, "wrong_noise": {"dim": 3, "noise_std": 3.0}}
SGAIS = {"particles": 16, "steps": 4, "hmc_moves": 1, "leapfrog_steps": 5}

StartOnCluster = Callable[..., Server]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are needed for a cluster")
    started = LocalCluster(Path(tmp_path_factory.mktemp("cluster")))
    yield started
    started.stop()


@pytest.fixture
def start_on_cluster(cluster: LocalCluster) -> Iterator[StartOnCluster]:
    running: list[RunningServer] = []
    prefix = f"mctest-{uuid.uuid4().hex[:10]}"

    def start(**overrides: Any) -> Server:
        overrides.setdefault("embedded_worker", True)
        settings = Settings(redis_url=cluster.url, key_prefix=prefix, poll_interval=0.1,
                            wait_timeout=180.0, **overrides)
        running.append(RunningServer(settings))
        return running[-1].handle

    yield start
    for item in reversed(running):
        item.stop()
    delete_prefix(cluster.url, prefix)


@pytest.mark.e2e
def test_cluster_mode_is_detected_from_any_node(cluster: LocalCluster) -> None:
    for port in cluster.ports:
        assert Connection.detect(f"redis://127.0.0.1:{port}/0").cluster
    if local_redis_available():
        assert not Connection.detect(LOCAL_REDIS).cluster
    with pytest.raises(ValueError, match="only database 0"):
        Connection(f"redis://127.0.0.1:{cluster.ports[0]}/3", cluster=True).sync_client()


@pytest.mark.e2e
def test_comparisons_on_every_shard_match_the_exact_oracle(
    cluster: LocalCluster, start_on_cluster: StartOnCluster
) -> None:
    server = start_on_cluster()
    prefix = server.settings.key_prefix
    x, y = regression_data(200, seed=5)
    bodies = chunks(x, y, 100)
    with server.client() as client:
        ids = [client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
               for _ in range(9)]
        for cid in ids:
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=bodies[0]).status_code == 202
        # ?wait=true waits on the comparison's sharded updates channel
        finals = [client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=bodies[1])
                  for cid in ids]
        listed = {c["id"] for c in client.get("/v1/comparisons").json()["comparisons"]}
        gone = client.delete(f"/v1/comparisons/{ids[0]}")
        assert gone.status_code == 204
        assert client.get(f"/v1/comparisons/{ids[0]}/evidence").status_code == 404
    masters = {cluster.master_of(Keys(prefix, cid).meta) for cid in ids}
    assert len(masters) >= 2, "9 random ids all landed on one shard"
    assert listed == set(ids)
    expected = {name: exact_log_evidence(CONFIGS[name], x, y, columns)
                for name, columns in COLUMNS.items()}
    for final in finals:
        assert final.status_code == 200, final.text
        models = by_name(final.json())
        assert (final.json()["sequence"], final.json()["n_observations"]) == (2, 200)
        for name, value in expected.items():
            assert models[name]["log_evidence"] == pytest.approx(value, rel=1e-10, abs=1e-8)
    store = server.redis()
    assert not list(store.scan_iter(match=f"{prefix}:{{cmp:{ids[0]}}}:*"))
    assert {m.decode() for m in store.smembers(index_key(prefix))} == set(ids[1:])


@pytest.mark.e2e
def test_websocket_updates_cross_api_processes_on_sharded_channels(
    start_on_cluster: StartOnCluster,
) -> None:
    ingest = start_on_cluster()
    listen = start_on_cluster(embedded_worker=False)
    x, y = regression_data(60)
    with ingest.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]

    async def scenario() -> list[dict[str, Any]]:
        url = f"{listen.ws_url}/v1/comparisons/{cid}/ws"
        async with websockets.connect(url) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "snapshot"
            async with httpx.AsyncClient(base_url=ingest.url) as client:
                for chunk in chunks(x, y, 20):
                    await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
            return [json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in range(3)]

    updates = asyncio.run(scenario())
    assert [u["evidence"]["version"] for u in updates] == [1, 2, 3]
    assert [u["evidence"]["n_observations"] for u in updates] == [20, 40, 60]


@pytest.mark.e2e
def test_a_killed_worker_is_recovered_to_the_same_bits(start_on_cluster: StartOnCluster) -> None:
    server = start_on_cluster(embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    body = comparison_body("sgais", seed=3, **SGAIS)
    with server.client() as client:
        reference = create_and_ingest(client, body, 120, 30)
        drain(make_worker(server, "solo"), store, Keys(prefix, reference), 4)
        cid = create_and_ingest(client, body, 120, 30)
    keys = Keys(prefix, cid)
    doomed = make_worker(server, "doomed")
    assert doomed.queue.acquire(cid, 0.5)
    snap = doomed.queue.snapshot(cid)
    assert snap is not None
    entries = doomed.queue.read(cid, 2)
    late_commit = doomed.compute(cid, snap, entries[0])  # ... and the worker dies here
    assert store.xpending(keys.stream, GROUP)["pending"] == 2

    drain(make_worker(server, "rescuer"), store, keys, 4)
    assert states(store, keys) == states(store, Keys(prefix, reference))
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
    assert [int(s) for s in store.hmget(keys.meta, "sequence", "version")] == [4, 4]
    assert doomed.queue.commit(cid, late_commit) == STALE


@pytest.mark.e2e
def test_a_master_failover_loses_and_doubles_nothing(
    cluster: LocalCluster, start_on_cluster: StartOnCluster
) -> None:
    """Kill (SIGKILL) the master that holds a comparison while a worker applies its chunks; its
    replica takes over and the comparison resumes to the same bits as an undisturbed twin."""
    server = start_on_cluster(embedded_worker=False)
    store, prefix = server.redis(), server.settings.key_prefix
    body = comparison_body("sgais", seed=7, **SGAIS)
    x, y = regression_data(240, seed=7)
    bodies = chunks(x, y, 20)
    with server.client() as client:
        reference = create_and_ingest(client, body, 240, 20, seed=7)
        drain(make_worker(server, "solo"), store, Keys(prefix, reference), 12)
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in bodies[:8]:
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        keys = Keys(prefix, cid)
        master = cluster.master_of(keys.meta)
        cluster.wait_for_replicas(master)  # Redis replicates asynchronously: see README
        stop = threading.Event()
        worker = make_worker(server, "survivor", batch_chunks=1)
        thread = threading.Thread(target=worker.run, args=(stop,))
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while int(store.hget(keys.meta, "sequence")) < 2:  # mid-stream
                assert time.monotonic() < deadline
                time.sleep(0.01)
            cluster.kill(master)
            promoted = cluster.wait_for_failover(keys.meta, master)
            for chunk in bodies[8:]:
                accepted = client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
                assert accepted.status_code == 202, accepted.text
            deadline = time.monotonic() + 120
            while client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] < 12:
                assert time.monotonic() < deadline, "the comparison did not resume"
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join()
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        trace = client.get(f"/v1/comparisons/{cid}/history").json()["points"]
    assert promoted != master
    assert evidence["n_observations"] == 240
    assert all(m["n_observations"] == 240 for m in evidence["models"])
    assert [p["sequence"] for p in trace] == list(range(1, 13))
    assert store.llen(keys.blocks) == 12
    assert store.xpending(keys.stream, GROUP)["pending"] == 0
    assert states(store, keys) == states(store, Keys(prefix, reference))


def test_the_cluster_compose_file_joins_six_nodes_and_points_the_service_at_one() -> None:
    spec = yaml.safe_load((Path(__file__).parents[3] / "docker-compose.cluster.yml").read_text())
    services = spec["services"]
    nodes = sorted(name for name in services if name.startswith("redis-") and name[6:].isdigit())
    assert len(nodes) == 6
    for name in nodes:
        command = services[name]["command"]
        assert command[:3] == ["redis-server", "--cluster-enabled", "yes"]
        assert "--appendonly" in command and "always" in command
    init = services["redis-cluster-init"]["command"][0]
    assert "redis-cli --cluster create" in init
    assert "--cluster-replicas 1" in init and all(name in init for name in nodes)
    for role in ("api", "worker"):
        url = services[role]["environment"]["REDIS_URL"]
        assert url.split("//")[1].split(":")[0] in nodes
        condition = services[role]["depends_on"]["redis-cluster-init"]["condition"]
        assert condition == "service_completed_successfully"
