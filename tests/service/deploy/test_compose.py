"""docker-compose.yml cannot rot unnoticed: start each service's command as compose would (no
Docker engine here) — redis-server with the same flags, the API, a worker — and run the loop."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from service_helpers import by_name, chunks, comparison_body, exact_log_evidence, regression_data
from service_server import free_port

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _substitute(value: str, ports: dict[str, str]) -> str:
    for old, new in ports.items():
        value = value.replace(old, new)
    return value


def _command(service: dict[str, Any], ports: dict[str, str]) -> list[str]:
    command = [_substitute(str(part), ports) for part in service["command"]]
    if command[0] in ("modelcompare", "python"):
        command[0] = str(BIN / command[0])
    return command


def _healthy(service: dict[str, Any], ports: dict[str, str], env: dict[str, str]) -> bool:
    test = [_substitute(str(part), ports) for part in service["healthcheck"]["test"]]
    assert test[0] == "CMD"
    test = test[1:]
    if test[0] == "python":
        test[0] = sys.executable
    return subprocess.run(test, env=env, capture_output=True, timeout=10).returncode == 0


@pytest.fixture
def compose(tmp_path: Path) -> Iterator[tuple[dict[str, Any], str]]:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = spec["services"]
    redis_port, api_port, metrics_port = free_port(), free_port(), free_port()
    ports = {"redis:6379": f"127.0.0.1:{redis_port}", "8000": str(api_port),
             "9100": str(metrics_port)}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        redis_command = _command(services["redis"], ports)
        assert redis_command[0] == "redis-server"
        redis_command[0] = shutil.which("redis-server") or "redis-server"
        processes.append(subprocess.Popen(
            [*redis_command, "--port", str(redis_port), "--bind", "127.0.0.1",
             "--dir", str(tmp_path), "--save", ""], stdout=subprocess.DEVNULL))
        for name in ("api", "worker"):
            env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
            env.update({k: _substitute(str(v), ports)
                        for k, v in services[name].get("environment", {}).items()})
            processes.append(subprocess.Popen(_command(services[name], ports), env=env,
                                              cwd=tmp_path, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        env = {**os.environ}
        for name in ("redis", "api", "worker"):
            if name == "redis":
                check = ["redis-cli", "-p", str(redis_port), "ping"]
                while subprocess.run(check, capture_output=True).stdout.strip() != b"PONG":
                    assert time.monotonic() < deadline, "redis did not start"
                    time.sleep(0.1)
                continue
            while not _healthy(services[name], ports, env):
                assert time.monotonic() < deadline, f"{name} never became healthy"
                assert all(p.poll() is None for p in processes), f"{name} exited"
                time.sleep(0.2)
        yield spec, f"http://127.0.0.1:{api_port}"
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.mark.e2e
def test_compose_services_run_the_loop(compose: tuple[dict[str, Any], str]) -> None:
    spec, url = compose
    redis_service = spec["services"]["redis"]
    assert "--appendonly" in redis_service["command"] and "yes" in redis_service["command"]
    assert "ports" not in redis_service  # redis is not published to the host
    assert spec["services"]["api"]["environment"]["MODELCOMPARE_EMBEDDED_WORKER"] == "false"
    x, y = regression_data(50)
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/readyz").json() == {"status": "ready"}
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        evidence = client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                               json=chunks(x, y, 50)[0]).json()
    assert evidence["sequence"] == 1  # applied by the standalone worker: the API runs none
    expected = exact_log_evidence({"dim": 3}, x, y, [0, 1, 2])
    assert by_name(evidence)["right"]["log_evidence"] == pytest.approx(expected, rel=1e-10)


def _docker_context(paths: list[str]) -> set[str]:
    """Which of ``paths`` .dockerignore lets into the build context (Docker's rules: patterns in
    order, the last that matches a path or one of its parent folders wins, ``!`` re-includes)."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    kept = set()
    for path in paths:
        parts = path.split("/")
        included = True
        for rule in rules:
            pattern = rule.lstrip("!").rstrip("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.replace("**/", ""))
                   for p in prefixes):
                included = rule.startswith("!")
        if included:
            kept.add(path)
    return kept


def test_the_image_is_built_from_a_small_context_with_pinned_torch() -> None:
    """No Docker engine here: read the files. The context has what the Dockerfile copies and
    not a local .venv (gigabytes) or the repository's other folders; torch is pinned to the
    version the README's set-up and .ci/run install."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    copied = [source for line in dockerfile.splitlines() if line.startswith("COPY ")
              for source in line.split()[1:-1]]
    assert set(copied) == {"pyproject.toml", "README.md", "modelcompare", "models", "estimators",
                           "service"}
    wanted = ["pyproject.toml", "README.md", "modelcompare/__init__.py", "models/base.py",
              "estimators/sgais.py", "service/cli/__init__.py", "service/static/dashboard.js"]
    unwanted = [".venv/lib/python3.11/site-packages/torch/__init__.py", ".git/HEAD",
                "tests/test_readme.py", "benchmarks/results/accuracy.json",
                ".modelcompare/redis.db", "test-artifacts/dashboard.png",
                "service/__pycache__/cli.cpython-311.pyc"]
    assert _docker_context(wanted + unwanted) == set(wanted)
    pins = {re.search(r"torch==([\d.]+)", text).group(1)  # type: ignore[union-attr]
            for text in (dockerfile, (ROOT / "README.md").read_text(),
                         (ROOT / ".ci" / "run").read_text())}
    assert len(pins) == 1, pins
