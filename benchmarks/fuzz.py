"""The OpenAPI contract under fire: ``schemathesis run <server>/openapi.json --checks all`` with the
coverage, fuzzing and stateful phases, seeded, against a real server (uvicorn, embedded Redis,
inline worker, API keys on). Every check counts: no 5xx, every status, header, content type and
body as documented, schema-valid requests accepted and invalid ones rejected, 405 with ``Allow``,
created comparisons reachable through the document's links. ``schemathesis.toml`` (repository
root) lists the few rules JSON Schema cannot state. Path ids are a live comparison 3 times in 4
(DELETE excepted, so they stay alive), else generated.

    python benchmarks/fuzz.py                    # 300 examples per operation: results/fuzz.json
    python benchmarks/fuzz.py --examples 100 --out /tmp/fuzz.json      # what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from _common import environment, table, write_json

from modelcompare.service.api.main import create_app
from modelcompare.service.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
KEY = "fuzz-admin-key"
PHASES = "coverage,fuzzing,stateful"
# Comparisons the cases address by id: a regression on 4 columns, a 3-class classifier, a model
# without inputs (y only).
COMPARISONS: list[dict[str, Any]] = [
    {
        "name": "regression",
        "estimator": {"method": "exact"},
        "x_dim": 4,
        "models": [
            {"name": "small", "family": "linear_regression", "config": {"dim": 2}},
            {"name": "large", "family": "linear_regression", "config": {"dim": 4}},
        ],
    },
    {
        "name": "classes",
        "estimator": {"method": "sgais", "particles": 16},
        "models": [
            {"name": "logit", "family": "logistic_regression", "config": {"dim": 2, "classes": 3}}
        ],
    },
    {
        "name": "coin",
        "estimator": {"method": "exact"},
        "models": [{"name": "coin", "family": "beta_bernoulli"}],
    },
]


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="critical")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def config_with_live_ids(ids: list[str], path: Path) -> Path:
    """The repository's schemathesis.toml, plus: ``cid`` is one of ``ids`` 3 times in 4."""
    values = ", ".join(json.dumps(cid) for cid in ids)
    path.write_text(
        (ROOT / "schemathesis.toml").read_text()
        + f"""
[dictionaries.comparisons]
values = [{values}]

[[operations]]
include-path-regex = "[{{]cid[}}]"
exclude-method = "DELETE"
parameters = {{ "path.cid" = {{ dictionary = "comparisons", probability = 0.75 }} }}
"""
    )
    return path


def run_schemathesis(
    url: str, config: Path, examples: int, seed: int, report: Path
) -> tuple[list[str], str]:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--phases",
        PHASES,
        "--seed",
        str(seed),
        "--max-examples",
        str(examples),
        "--generation-database",
        "none",
        "--header",
        f"Authorization: Bearer {KEY}",
        "--request-timeout",
        "60",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    return command, finished.stdout + finished.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="max examples per operation")
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument(
        "--quick", action="store_true", help="30 examples; writes under results/quick/"
    )
    parser.add_argument("--out", default=None, help="JSON path (default results/fuzz.json)")
    args = parser.parse_args()
    examples = 30 if args.quick else args.examples
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(
            redis_url=None,
            data_dir=Path(scratch) / "data",
            api_keys={KEY: {"read": ["*"], "write": ["*"]}},
            max_rows=1000,
            max_body_bytes=1_000_000,
            wait_timeout=1.0,
            poll_interval=0.1,
        )
        server, thread, url = serve(settings)
        try:
            with httpx.Client(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {KEY}"}
            ) as client:
                ids = [
                    client.post("/v1/comparisons", json=body).raise_for_status().json()["id"]
                    for body in COMPARISONS
                ]
            config = config_with_live_ids(ids, Path(scratch) / "schemathesis.toml")
            report_path = Path(scratch) / "report.json"
            command, output = run_schemathesis(url, config, examples, args.seed, report_path)
            report = json.loads(report_path.read_text())
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    seconds = time.perf_counter() - started
    print(output[output.find("=== SUMMARY") - 40 :] if "=== SUMMARY" in output else output)
    phases = {name: phase["status"] for name, phase in report["phases"].items()}
    failures = report["failures"]
    print(table(["phase", "status"], sorted(phases.items())))
    cases = report["test_cases"]
    print(
        f"\n{cases['generated']} cases in {seconds:.0f} s; {len(failures)} failures, "
        f"{len(report['errors'])} errors (target 0)"
    )
    ok = (
        not failures
        and not report["errors"]
        and all(phases[name] == "success" for name in PHASES.split(","))
    )
    path = write_json(
        "fuzz",
        {
            "environment": environment(1),
            "command": " ".join(command[1:]).replace(str(config), "schemathesis.toml+live-ids"),
            "schemathesis_version": report["schemathesis_version"],
            "examples_per_operation": examples,
            "seed": args.seed,
            "seconds": seconds,
            "test_cases": cases,
            "phases": phases,
            "failures": failures,
            "errors": report["errors"],
            "warnings": report["warnings"],
            "valid_rates": report["valid_rates"],
            "passed": ok,
        },
        args.out,
    )
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
