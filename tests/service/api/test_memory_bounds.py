"""Memory bounded in total: the API's in-flight request bytes (503 past them, nothing stored), the
chunk parser that keeps them small (the same answers and blocks as json), and the worker's
history cache (bytes, least recently used, only the columns some model reads)."""

from __future__ import annotations

import json
import random
import socket
import struct
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from pydantic import ValidationError
from service_helpers import assert_error
from service_server import (
    LOCAL_REDIS,
    RunningServer,
    delete_prefix,
    local_redis_available,
    make_worker,
)

from modelcompare.estimators import Rows, state_to_bytes
from modelcompare.service import worker as worker_module
from modelcompare.service.api import chunk_text, ingest
from modelcompare.service.api import inflight as budget
from modelcompare.service.api.errors import ApiError
from modelcompare.service.core.config import CHUNK_BODY_COST, Settings
from modelcompare.service.engine import runner_for
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.store import history as history_module
from modelcompare.service.store.codec import decode_block, encode_block
from modelcompare.service.store.history import BlockHistory, HistoryCache, read_columns

MiB = 1024 * 1024

# ---------------------------------------------------------------------------------- settings


def test_settings_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELCOMPARE_MAX_INFLIGHT_BYTES", str(200 * MiB))
    monkeypatch.setenv("MODELCOMPARE_HISTORY_CACHE_BYTES", str(64 * MiB))
    settings = Settings()
    assert settings.max_inflight_bytes == 200 * MiB
    assert settings.history_cache_bytes == 64 * MiB
    assert settings.history_cache == 16  # the count bound stays


def test_inflight_bytes_must_hold_one_full_size_chunk() -> None:
    Settings(max_body_bytes=16 * MiB, max_inflight_bytes=CHUNK_BODY_COST * 16 * MiB)
    with pytest.raises(ValidationError, match="max_inflight_bytes"):
        Settings(max_body_bytes=16 * MiB, max_inflight_bytes=CHUNK_BODY_COST * 16 * MiB - 1)
    with pytest.raises(ValidationError):
        Settings(max_inflight_bytes=1000)  # under 1 MiB
    with pytest.raises(ValidationError):
        Settings(history_cache_bytes=0)


def test_the_default_budget_holds_three_full_size_chunks() -> None:
    settings = Settings()
    assert settings.max_inflight_bytes // (CHUNK_BODY_COST * settings.max_body_bytes) == 3


# ------------------------------------------------------------------------- in-flight budget


def test_a_request_alone_always_fits_and_others_wait_their_turn() -> None:
    inflight = budget.Inflight(100)
    assert inflight.take(250)  # alone: larger than the budget, still admitted
    assert not inflight.take(1)
    inflight.give(250)
    assert inflight.take(60) and inflight.take(40) and not inflight.take(1)
    reservation = budget.Reservation(inflight)
    with pytest.raises(ApiError) as refused:
        reservation.extend(10)
    assert refused.value.status == 503 and refused.value.code == "overloaded"
    assert refused.value.headers == {"Retry-After": str(budget.RETRY_AFTER)}
    assert refused.value.details["limit"] == "max_inflight_bytes"
    inflight.give(100)
    reservation.ensure(30)
    reservation.ensure(20)  # already held
    assert reservation.held == 30 == inflight.held
    reservation.release()
    assert inflight.held == 0
    alone = budget.Reservation(inflight)
    alone.extend(60)
    alone.ensure(300)  # a request alone may grow past the budget (a body parsed by json)
    other = budget.Reservation(inflight)
    with pytest.raises(ApiError):
        other.extend(1)
    alone.release()


@pytest.fixture
def local_server() -> Iterator[RunningServer]:
    if not local_redis_available():
        pytest.skip("no Redis at 127.0.0.1:6379")
    prefix = f"mctest-{uuid.uuid4().hex[:10]}"
    server = RunningServer(Settings(redis_url=LOCAL_REDIS, key_prefix=prefix, poll_interval=0.1,
                                    embedded_worker=False, max_body_bytes=MiB,
                                    max_inflight_bytes=8 * MiB))
    yield server
    server.stop()
    delete_prefix(LOCAL_REDIS, prefix)


COMPARISON = {"name": "memory", "x_dim": 3, "estimator": {"method": "exact"},
              "models": [{"name": "a", "family": "linear_regression", "config": {"dim": 2},
                          "columns": [0, 2]}]}


def test_past_the_budget_503_with_retry_after_and_nothing_stored(
        local_server: RunningServer) -> None:
    inflight = local_server.app.state.inflight
    url = local_server.handle.url
    chunk = {"x": [[0.5, 1.0, 1.5]] * 1000, "y": [0.25] * 1000}
    with httpx.Client(base_url=url, timeout=60) as client:
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        assert inflight.take(8 * MiB - 1000)  # other requests hold nearly all of it
        try:
            response = client.post(f"/v1/comparisons/{cid}/chunks", json=chunk,
                                   headers={"Idempotency-Key": "k1"})
            assert_error(response, 503, "overloaded")
            assert response.headers["Retry-After"] == str(budget.RETRY_AFTER)
            details = response.json()["error"]["details"]
            assert details["limit"] == "max_inflight_bytes" and details["allowed"] == 8 * MiB
            assert "MODELCOMPARE_MAX_INFLIGHT_BYTES" in response.json()["error"]["message"]
            # reads and small bodies are not held back
            assert client.get(f"/v1/comparisons/{cid}/evidence").status_code == 200
        finally:
            inflight.give(8 * MiB - 1000)
        _given_back(inflight)
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        assert evidence["sequence"] == 0
        accepted = client.post(f"/v1/comparisons/{cid}/chunks", json=chunk,
                               headers={"Idempotency-Key": "k1"})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["sequence"] == 1 and not accepted.json()["duplicate"]
        _given_back(inflight)


def _given_back(inflight: budget.Inflight) -> None:
    """Every request's share is given back once it ended (just after its response)."""
    deadline = time.monotonic() + 5
    while inflight.held:
        assert time.monotonic() < deadline, inflight.held
        time.sleep(0.01)


def test_a_chunked_upload_is_counted_as_it_arrives(local_server: RunningServer) -> None:
    inflight = local_server.app.state.inflight
    with httpx.Client(base_url=local_server.handle.url, timeout=60) as client:
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        body = json.dumps({"x": [[0.5, 1.0, 1.5]] * 100, "y": [0.25] * 100}).encode()
        assert inflight.take(8 * MiB - 100)
        try:
            response = client.post(f"/v1/comparisons/{cid}/chunks",
                                   content=iter([body[:1000], body[1000:]]),
                                   headers={"content-type": "application/json"})
            assert_error(response, 503, "overloaded")
        finally:
            inflight.give(8 * MiB - 100)
        assert client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] == 0
        response = client.post(f"/v1/comparisons/{cid}/chunks", content=iter([body]),
                               headers={"content-type": "application/json"})
        assert response.status_code == 202, response.text


def test_a_body_over_max_body_bytes_is_still_413(local_server: RunningServer) -> None:
    inflight = local_server.app.state.inflight
    with httpx.Client(base_url=local_server.handle.url, timeout=60) as client:
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        assert inflight.take(8 * MiB)
        try:
            response = client.post(f"/v1/comparisons/{cid}/chunks", content=b" " * (2 * MiB),
                                   headers={"content-type": "application/json"})
        finally:
            inflight.give(8 * MiB)
        assert_error(response, 413, "too_large")


@pytest.mark.parametrize(("ahead_bytes", "second_pass"), [(1, 1), (64 * MiB, 3)])
def test_a_worker_reads_ahead_a_bounded_number_of_bytes(
        local_server: RunningServer, monkeypatch: pytest.MonkeyPatch, ahead_bytes: int,
        second_pass: int) -> None:
    """The first pass over a comparison reads one chunk ahead (their size unknown); later ones
    about READ_AHEAD_BYTES of them, at most batch_chunks, at least one."""
    monkeypatch.setattr(worker_module, "READ_AHEAD_BYTES", ahead_bytes)
    with httpx.Client(base_url=local_server.handle.url, timeout=60) as client:
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        for _ in range(6):
            chunk = {"x": [[0.5, 1.0, 1.5]] * 10, "y": [0.25] * 10}
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        worker = make_worker(local_server.handle, "reader", batch_chunks=3)
        counts: list[int] = []
        read = worker.queue.read

        def counted(cid: str, count: int) -> list[Any]:
            counts.append(count)
            return read(cid, count)

        worker.queue.read = counted  # type: ignore[method-assign]
        assert worker.run_once() and counts[0] == 1
        counts.clear()
        assert worker.run_once() and counts[0] == second_pass
        while worker.run_once():
            pass
        assert client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] == 6


# ---------------------------------------------------------------------- the chunk parser


class Spec:
    """What parse_chunk reads of a comparison, by position (no named design), with no model
    to refuse rows."""

    def __init__(self, x_dim: int, has_y: bool) -> None:
        self.x_dim, self.has_y, self.models, self.design = x_dim, has_y, [], None

    def unavailable(self) -> None:  # every family of no model is here
        return None


def _parse(body: bytes, spec: Spec, fast: bool) -> Any:
    saved = ingest.parse_plain_chunk
    if not fast:
        ingest.parse_plain_chunk = lambda body, x_dim: None  # type: ignore[assignment]
    try:
        block, rows = ingest.parse_chunk(body, spec, 100_000)  # type: ignore[arg-type]
        return bytes(block), rows
    except ApiError as exc:
        return exc.status, exc.code, exc.message
    finally:
        ingest.parse_plain_chunk = saved


ODD = ["0", "-0", "-0.0", "0.0", "1e5", "1E+05", "-1e-05", "1.5e300", "1e400", "007", "+1",
       ".5", "1.", "-", "1e", "NaN", "Infinity", "1 2", "", " ", "\t", "0x1", "1.2.3", "1e5e2",
       "- 1", "-01", "00", "1e-0", "-0e0", "12345678901234567890", "-9223372036854775809",
       "1e-400", "true", "null", '"1"', "[1]", "{}", "0.000012345678901234567890"]


def _number(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return repr(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
    if kind == 1:
        return str(rng.randint(-10**19, 10**19))
    if kind == 2:
        return rng.choice(ODD)
    if kind == 3:
        return f"{rng.uniform(-10, 10):.3g}"
    return repr(rng.uniform(-1e3, 1e3))


def _body(rng: random.Random, columns: int) -> str:
    blank = rng.choice(["", " ", "  ", "\n", "\t", "\r\n"])
    rows = rng.randint(1, 4)

    def array(count: int) -> str:
        return "[" + blank + ("," + blank).join(_number(rng) for _ in range(count)) + blank + "]"

    x = "[" + blank + ("," + blank).join(
        array(columns if rng.random() < 0.9 else rng.randint(0, 5)) for _ in range(rows)
    ) + blank + "]"
    y = array(rows if rng.random() < 0.9 else rng.randint(0, 5))
    return rng.choice([
        f'{{"x": {x}, "y": {y}}}', f'{{"y":{y} ,"x" :{x} }}', f'{{"x": {x}}}', f'{{"y": {y}}}',
        f'{{"x": {x}, "x": {x}}}', f'{{"x": {x}, "y": {y}', f'{{"x": {x}, "y": {y}, }}',
        f"[{x}]", '{"x": [[]], "y": [1]}', '{"y": [ ]}', '{"x": [[1] [2]], "y": [1, 2]}',
        '{"x": [[1],,[2]], "y": [1, 2]}', '{"y": [1]}\f', '{"x": [[1],[2]], "y": [1, 2], "z": 1}'])


@pytest.mark.slow
def test_numpy_parsing_answers_and_stores_exactly_what_json_parsing_does() -> None:
    rng = random.Random(7)
    fast = 0
    for _ in range(3000):
        columns = rng.randint(1, 4)
        body = _body(rng, columns).encode()
        spec = Spec(columns if rng.random() < 0.9 else 0, rng.random() < 0.7)
        fast += chunk_text.parse_plain_chunk(body, spec.x_dim) is not None
        assert _parse(body, spec, True) == _parse(body, spec, False), body
    assert fast > 150  # the fast path was exercised, not only the fallback


@pytest.mark.parametrize("options", [{}, {"separators": (",", ":")}, {"indent": 2}])
def test_json_writers_output_takes_the_numpy_path(options: dict[str, Any]) -> None:
    generator = np.random.default_rng(0)
    x, y = generator.normal(size=(50, 7)) * 1e-3, generator.normal(size=50) * 1e6
    body = json.dumps({"x": x.tolist(), "y": y.tolist()}, **options).encode()
    assert chunk_text.parse_plain_chunk(body, 7) is not None
    block, rows = ingest.parse_chunk(body, Spec(7, True), 1000)  # type: ignore[arg-type]
    assert rows == 50 and bytes(block) == encode_block(x, y)


@pytest.mark.slow
def test_a_chunk_parse_holds_less_than_its_set_aside_multiple() -> None:
    row = "[" + ",".join(["0.5"] * 999) + ",0.5]"
    body = ('{"x": [' + ",".join([row] * 2000) + '], "y": [' + ",".join(["1.5"] * 2000)
            + "]}").encode()
    tracemalloc.start()
    try:
        block, rows = ingest.parse_chunk(body, Spec(1000, True), 2000)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows == 2000 and len(block) == 9 + 8 * 2000 * 1001
    assert peak < (CHUNK_BODY_COST - 1) * len(body)  # the body itself is the 6th


# ------------------------------------------------------------------------ history cache


class FakeRedis:
    """The LRANGE a HistoryCache needs, counting the bytes of each reply."""

    def __init__(self) -> None:
        self.lists: dict[str, list[bytes]] = {}
        self.replies: list[int] = []

    def lrange(self, key: str, start: int, stop: int) -> list[bytes]:
        reply = self.lists.get(key, [])[start:stop + 1]
        self.replies.append(sum(len(item) for item in reply))
        return list(reply)


def _store(redis: FakeRedis, cid: str, blocks: int, rows: int, columns: int,
           seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    generator = np.random.default_rng(seed)
    data = [(generator.normal(size=(rows, columns)), generator.normal(size=rows))
            for _ in range(blocks)]
    redis.lists[f"p:{{cmp:{cid}}}:blocks"] = [encode_block(x, y) for x, y in data]
    return data


def test_read_columns_narrow_only_when_some_are_unread() -> None:
    class Model:
        def __init__(self, columns: list[int]) -> None:
            self.columns = columns

    assert read_columns([Model([7]), Model([])], 10) == (7,)
    assert read_columns([Model([3, 1]), Model([1, 5])], 10) == (1, 3, 5)
    assert read_columns([Model([0, 1]), Model([2])], 3) is None  # all of them
    assert read_columns([Model([])], 0) is None


def test_the_cache_keeps_only_the_columns_read(monkeypatch: pytest.MonkeyPatch) -> None:
    redis = FakeRedis()
    monkeypatch.setattr(history_module, "Keys", _Keys)
    data = _store(redis, "a", blocks=4, rows=300, columns=1000)
    cache = HistoryCache(redis, "p", capacity=4, max_bytes=10 * MiB)  # type: ignore[arg-type]
    history = cache.get("a", 1000, True, 4, (3, 998))
    assert history.loaded == 4 and history.nbytes <= 2048 * 3 * 8
    rows = history.prefix(4).blocks(10_000)
    expected_x = np.concatenate([x[:, [3, 998]] for x, _ in data])
    got = next(iter(rows))
    assert np.array_equal(got.x.numpy(), expected_x)
    assert np.array_equal(got.y.numpy(), np.concatenate([y for _, y in data]))
    # a spec whose models read another column: loaded again, wider
    assert cache.get("a", 1000, True, 4, (3, 5, 998)).kept == (3, 5, 998)
    assert cache.get("a", 1000, True, 4, (3,)).kept == (3, 5, 998)  # covered: kept


class _Keys:
    def __init__(self, prefix: str, cid: str) -> None:
        self.blocks = f"{prefix}:{{cmp:{cid}}}:blocks"


def test_loading_fetches_a_bounded_number_of_bytes_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    redis = FakeRedis()
    monkeypatch.setattr(history_module, "Keys", _Keys)
    monkeypatch.setattr(history_module, "LOAD_BYTES", 100_000)
    _store(redis, "a", blocks=40, rows=100, columns=30)  # 40 blocks of ~25 kB
    cache = HistoryCache(redis, "p", capacity=4)  # type: ignore[arg-type]
    assert cache.get("a", 30, True, 40).loaded == 40
    assert len(redis.replies) > 5 and max(redis.replies) <= 100_000 + 30_000


def test_the_cache_is_bounded_by_bytes_least_recently_used_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    redis = FakeRedis()
    monkeypatch.setattr(history_module, "Keys", _Keys)
    for seed, cid in enumerate("abcd"):
        _store(redis, cid, blocks=2, rows=512, columns=63, seed=seed)  # 1,024 rows × 64 × 8
    one = 1024 * 64 * 8
    cache = HistoryCache(redis, "p", capacity=16, max_bytes=int(2.5 * one))  # type: ignore[arg-type]
    for cid in "ab":
        assert cache.get(cid, 63, True, 2).nbytes == one
    cache.get("a", 63, True, 2)  # a is now the most recently used
    cache.get("c", 63, True, 2)
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.nbytes <= 2.5 * one
    # the one in use stays even alone over the bound
    small = HistoryCache(redis, "p", capacity=16, max_bytes=one // 2)  # type: ignore[arg-type]
    small.get("a", 63, True, 2)
    assert len(small) == 1 and small.nbytes == one
    small.get("d", 63, True, 2)
    assert "a" not in small and "d" in small
    # the count bound holds too
    counted = HistoryCache(redis, "p", capacity=2)  # type: ignore[arg-type]
    for cid in "abc":
        counted.get(cid, 63, True, 2)
    assert len(counted) == 2 and "a" not in counted


@pytest.mark.slow
def test_narrowed_history_gives_bit_identical_updates() -> None:
    models = [ModelSpec(name="one", family="linear_regression", config={"dim": 1},
                        columns=[6], prior_weight=0.5),
              ModelSpec(name="two", family="linear_regression", config={"dim": 2},
                        columns=[4, 1], prior_weight=0.5)]
    spec = ComparisonSpec(id="c", name="c", seed=3, created_at=0.0, x_dim=8, has_y=True,
                          estimator={"method": "sgais", "particles": 32}, models=models)
    generator = np.random.default_rng(1)
    blocks = [encode_block(generator.normal(size=(60, 8)), generator.normal(size=60))
              for _ in range(4)]
    kept = read_columns(spec.models, spec.x_dim)
    assert kept == (1, 4, 6)
    full, narrow = BlockHistory(8, True), BlockHistory(8, True, kept)
    for block in blocks[:3]:
        full.append(decode_block(block))
        narrow.append(decode_block(block, kept))
    for model in spec.models:
        runner = runner_for(spec, model)
        states = {}
        for name, history in (("full", full), ("narrow", narrow)):
            state = runner.init_state()
            for sequence in (1, 2, 3):  # replayed blocks (catch-up): narrowed in the history
                state, _ = runner.update(state, history.block(sequence - 1),
                                         history.prefix(sequence - 1), sequence)
            state, _ = runner.update(state, decode_block(blocks[3]), history.prefix(3), 4)
            states[name] = state_to_bytes(state)  # a live chunk: full rows
        assert states["full"] == states["narrow"]
        assert narrow.block(2).x.shape == (60, 3)


def test_decode_block_keeps_the_columns_asked_for() -> None:
    x, y = np.arange(12.0).reshape(3, 4), np.array([1.0, 2.0, 3.0])
    rows = decode_block(encode_block(x, y), (3, 0))
    assert torch.equal(rows.x, torch.tensor(x[:, [3, 0]]))
    assert rows.x.is_contiguous() and torch.equal(rows.y, torch.tensor(y))
    assert isinstance(decode_block(encode_block(None, y)), Rows)


# ----------------------------------------------------------------- process level (e2e)


def _slow_request(url: str, path: str, length: int) -> socket.socket:
    """A request whose headers announce ``length`` body bytes, of which only a few are sent."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {length}\r\n\r\n").encode() + b'{"x": [')
    return sock


@pytest.mark.e2e
def test_a_real_server_refuses_past_its_inflight_bytes(tmp_path: Path) -> None:
    """``modelcompare serve`` as a process: a request that announced a large body holds its
    share while it arrives; another that would pass the budget gets 503 at once, before its body
    is read, and nothing of it is stored."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
    from fault_processes import ApiServer, RedisServer, service_env

    redis = RedisServer(tmp_path / "redis")
    redis.start()
    api = ApiServer(service_env(redis.url, "mem", max_body_bytes=4 * MiB,
                                max_inflight_bytes=40 * MiB))
    try:
        api.start()
        with httpx.Client(base_url=api.url, timeout=60) as client:
            cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
            path = f"/v1/comparisons/{cid}/chunks"
            held = _slow_request(api.url, path, 4 * MiB)  # sets aside 6 × 4 MiB
            try:
                time.sleep(0.5)
                value = 0.123456789  # ~3.2 MiB of rows: 6 × that passes what is left
                chunk = {"x": [[value, value, value]] * 60_000, "y": [value] * 60_000}
                response = client.post(path, json=chunk)
                assert_error(response, 503, "overloaded")
                assert response.headers["Retry-After"] == "1"
                small = client.post(path, json={"x": [[0.5, 1.0, 1.5]], "y": [0.25]})
                assert small.status_code == 202 and small.json()["sequence"] == 1
            finally:
                held.close()
            deadline = time.monotonic() + 10
            while (response := client.post(path, json=chunk)).status_code == 503:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert response.status_code == 202 and response.json()["sequence"] == 2
    finally:
        api.kill()
        redis.kill()
