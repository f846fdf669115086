"""Hostile input: schemathesis cases from the OpenAPI schema against a real server (uvicorn,
embedded Redis, inline worker, API keys on). Counts cases per operation and every 5xx (target:
none), with both valid and schema-violating bodies, path ids of real comparisons and random ones.

    python benchmarks/fuzz.py --examples 300            # writes benchmarks/results/fuzz.json
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import hypothesis.strategies as st
import schemathesis
import uvicorn
from _common import environment, table, write_json
from schemathesis import GenerationMode

from service.api.main import create_app
from service.core.config import Settings

KEY = "fuzz-admin-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
# Comparisons the cases may address by id: a regression on 4 columns, a 3-class classifier,
# a model without inputs (y only).
COMPARISONS: list[dict[str, Any]] = [
    {"name": "regression", "estimator": {"method": "exact"}, "x_dim": 4, "models": [
        {"name": "small", "family": "linear_regression", "config": {"dim": 2}},
        {"name": "large", "family": "linear_regression", "config": {"dim": 4}}]},
    {"name": "classes", "estimator": {"method": "sgais", "particles": 16}, "models": [
        {"name": "logit", "family": "logistic_regression", "config": {"dim": 2, "classes": 3}}]},
    {"name": "coin", "estimator": {"method": "exact"}, "models": [
        {"name": "coin", "family": "beta_bernoulli"}]},
]


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


class Fuzzer:
    """Runs hypothesis over every operation; path ``cid`` is a live comparison most of the time."""

    def __init__(self, url: str, client: httpx.Client) -> None:
        self.url = url
        self.client = client
        self.ids = [self._create(body) for body in COMPARISONS]
        self.cases: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.server_errors: list[dict[str, Any]] = []
        self.no_negative: list[str] = []

    def _create(self, body: dict[str, Any]) -> str:
        response = self.client.post("/v1/comparisons", json=body)
        response.raise_for_status()
        return str(response.json()["id"])

    def run(self, examples: int, seed: int, mode: GenerationMode) -> None:
        schema = schemathesis.openapi.from_url(f"{self.url}/openapi.json", headers=HEADERS)
        for result in schema.get_all_operations():
            operation = result.ok()
            strategy = operation.as_strategy(generation_mode=mode)
            slot = st.integers(min_value=0, max_value=len(self.ids))  # len: keep the random id

            @hypothesis.settings(max_examples=examples, deadline=None, database=None,
                                 derandomize=False, suppress_health_check=list(
                                     hypothesis.HealthCheck),
                                 phases=[hypothesis.Phase.generate])
            @hypothesis.given(case=strategy, index=slot)
            @hypothesis.seed(seed)
            def one(case: schemathesis.Case, index: int) -> None:
                if "cid" in (case.path_parameters or {}) and index < len(self.ids):
                    case.path_parameters["cid"] = self.ids[index]
                if case.query and "wait" in case.query:
                    case.query["wait"] = "false"  # never block on the worker
                response = case.call(base_url=self.url, headers=HEADERS, timeout=60)
                label = f"{case.method.upper()} {case.operation.path}"
                self.cases[label] += 1
                self.statuses[response.status_code] += 1
                if response.status_code >= 500:
                    self.server_errors.append({"operation": label, "status":
                                               response.status_code, "case": case.as_curl_command(
                                                   headers=HEADERS), "body": response.text[:500]})
                if case.method.upper() == "DELETE" and response.status_code == 204:
                    gone = case.path_parameters["cid"]
                    if gone in self.ids:
                        self.ids[self.ids.index(gone)] = self._create(
                            COMPARISONS[self.ids.index(gone)])

            try:
                one()
            except hypothesis.errors.Unsatisfiable:  # nothing to break: no parameters, no body
                self.no_negative.append(f"{operation.method.upper()} {operation.path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300,
                        help="cases per operation and generation mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON path (default results/fuzz.json)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(redis_url=None, data_dir=Path(data_dir), api_keys={
            KEY: {"read": ["*"], "write": ["*"]}}, max_rows=1000, max_body_bytes=1_000_000,
            wait_timeout=1.0, poll_interval=0.1)
        server, thread, url = serve(settings)
        try:
            with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
                fuzzer = Fuzzer(url, client)
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    fuzzer.run(args.examples, args.seed, mode)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    seconds = time.perf_counter() - started
    total = sum(fuzzer.cases.values())
    print(table(["operation", "cases"], sorted(fuzzer.cases.items())))
    statuses = dict(sorted(fuzzer.statuses.items()))
    print(f"\n{total} cases in {seconds:.0f} s; status codes {statuses}")
    print(f"5xx responses: {len(fuzzer.server_errors)} (target 0)")
    for error in fuzzer.server_errors[:10]:
        print(f"  {error['operation']} -> {error['status']}: {error['case']}")
    path = write_json("fuzz", {
        "environment": environment(1),
        "examples_per_operation_and_mode": args.examples,
        "seed": args.seed,
        "seconds": seconds,
        "cases": total,
        "cases_per_operation": dict(sorted(fuzzer.cases.items())),
        "status_codes": {str(k): v for k, v in sorted(fuzzer.statuses.items())},
        "server_errors": fuzzer.server_errors,
        "operations_without_negative_cases": fuzzer.no_negative,
    }, args.out)
    print(f"wrote {path}")
    return 1 if fuzzer.server_errors else 0


if __name__ == "__main__":
    sys.exit(main())
