"""Exactly-once ingest when Redis's replies are lost, without idempotency keys.

Real processes: redis-server (AOF, ``appendfsync always``), ``modelcompare serve`` reaching Redis
through a proxy that lets chosen ingest commands run and then drops their reply with the
connection (tests/faults/reply_dropper.py), and one ``modelcompare worker`` on Redis directly.
Two scenarios of 20 keyless 10-row chunks each, on a fresh comparison:

- ``no_retry``: 5 replies lost (every 4th ingest command); the client sends each chunk once;
- ``client_retries``: 10 replies lost (every 2nd ingest command, so the API's own re-send is
  lost too at times); the client re-sends a chunk on any 5xx or transport error (up to 5 times).

A chunk counts as applied once when the worker's evidence holds 200 rows for 200 sent. The same
scenarios run against a baseline checkout (``--baseline REF``, e.g. ``main``) in the same run.
Writes benchmarks/results/lost_replies.json; ``--quick`` runs the current code only.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import QUICK, ROOT, checkout, environment, table, verdict, write_json

sys.path[:0] = [str(ROOT / "tests" / "faults")]
from fault_processes import (  # noqa: E402
    ApiServer,
    RedisServer,
    WorkerProcess,
    packages,
    service_env,
)
from reply_dropper import DropRule, ReplyDropper  # noqa: E402

CHUNKS, ROWS = 20, 10
SCENARIOS = {"no_retry": (4, 5, 0), "client_retries": (2, 10, 5)}  # every, losses, retries
COMPARISON = {"name": "lost-replies", "x_dim": 1, "estimator": {"method": "exact"},
              "models": [{"name": "line", "family": "linear_regression",
                          "config": {"dim": 1}}]}


def ingest_marker(root: Path) -> bytes:
    """The sha1 the API of ``root`` sends its ingest script under (EVALSHA)."""
    code = (f"import hashlib; from {packages(root)}service.store import scripts; "
            "print(hashlib.sha1(scripts.INGEST.encode()).hexdigest())")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip().encode()


def send(client: httpx.Client, path: str, chunk: dict[str, Any], retries: int) -> list[str]:
    """POST a chunk, again after a 5xx or a transport error up to ``retries`` times; the
    answers, as status codes or error names."""
    answers = []
    for _ in range(retries + 1):
        try:
            status = client.post(path, json=chunk).status_code
        except httpx.TransportError as exc:
            answers.append(type(exc).__name__)
            continue
        answers.append(str(status))
        if status < 500:
            break
    return answers


def scenario(api: ApiServer, rule: DropRule, retries: int) -> dict[str, Any]:
    with httpx.Client(base_url=api.url, timeout=30) as client:
        cid = client.post("/v1/comparisons", json=COMPARISON).json()["id"]
        answers = []
        for index in range(CHUNKS):
            x = [[float(index * ROWS + row)] for row in range(ROWS)]
            y = [0.1 * value for (value,) in x]
            answers.append(send(client, f"/v1/comparisons/{cid}/chunks", {"x": x, "y": y},
                                retries))
        deadline = time.monotonic() + 60
        while True:
            described = client.get(f"/v1/comparisons/{cid}").json()
            if described["sequence"] == described["ingested"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
    counts = collections.Counter(answer for chunk in answers for answer in chunk)
    return {"chunks": CHUNKS, "rows_sent": CHUNKS * ROWS, "replies_lost": rule.dropped,
            "chunks_recorded": described["ingested"],
            "rows_applied": evidence["n_observations"], "answers": dict(counts),
            "all_answers_2xx": all(chunk[-1].startswith("2") for chunk in answers),
            "client_requests": sum(len(chunk) for chunk in answers)}


def run(root: Path, data_dir: Path) -> dict[str, Any]:
    redis = RedisServer(data_dir / "redis")
    redis.start()
    marker = ingest_marker(root)
    results = {}
    try:
        for name, (every, losses, retries) in SCENARIOS.items():
            rule = DropRule(marker, every=every, limit=losses)
            proxy = ReplyDropper(("127.0.0.1", redis.port), rule)
            prefix = f"lost-{name}"
            api = ApiServer(service_env(proxy.url, prefix), root)
            worker = WorkerProcess(service_env(redis.url, prefix), root)
            try:
                for child in (api, worker):
                    child.start()
                results[name] = scenario(api, rule, retries)
            finally:
                for child in (worker, api):
                    child.kill()
                proxy.close()
    finally:
        redis.kill()
    return results


def exactly_once(figures: dict[str, Any]) -> bool:
    return (figures["chunks_recorded"] == figures["chunks"]
            and figures["rows_applied"] == figures["rows_sent"] and figures["all_answers_2xx"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the current code only, into results/quick/")
    parser.add_argument("--baseline", default=None, help="a git ref to run beside the checkout")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline and not QUICK:
            root = checkout(args.baseline, Path(tmp) / "baseline-code")
            runs["baseline"] = run(root, Path(tmp) / "baseline")
        runs["current"] = run(ROOT, Path(tmp) / "current")
    rows = [[code, name, f["replies_lost"], f["client_requests"],
             " ".join(f"{k}×{v}" for k, v in sorted(f["answers"].items())),
             f"{f['chunks_recorded']}/{f['chunks']}", f"{f['rows_applied']}/{f['rows_sent']}",
             verdict(exactly_once(f))]
            for code, scenarios in runs.items() for name, f in scenarios.items()]
    print(table(["code", "scenario", "lost", "requests", "answers", "chunks", "rows",
                 "once"], rows))
    ok = all(exactly_once(f) for f in runs["current"].values())
    print(f"every chunk applied exactly once, every answer 2xx: {verdict(ok)}")
    write_json("lost_replies", {"environment": environment(1), "baseline": args.baseline,
                                "runs": runs, "pass": ok}, args.output)


if __name__ == "__main__":
    main()
