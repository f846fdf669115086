"""The API reaches Redis only through the store's doors (``modelcompare.service.store``:
``Comparisons``, ``DeadLetters``, ``Readiness``, ``UpdateFeed``): no module under service/api/
imports redis, builds key names (``Keys``), or touches a client, its pipelines or its scripts."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[3] / "service" / "api"
STORE = "modelcompare.service.store"
# Store modules that hand out Redis itself: its key names, its scripts, its clients.
REDIS_MODULES = {f"{STORE}.keys", f"{STORE}.scripts", f"{STORE}.connection"}
# What an API module may still take from them, and why.
ALLOWED = {
    # 503 mapping: the errors that mean "Redis is unavailable now" (a tuple of exception classes).
    ("errors.py", f"{STORE}.connection", "CLUSTER_UNAVAILABLE"),
    ("errors.py", f"{STORE}.connection", "UNAVAILABLE"),
    # The composition root: it makes the one client and hands it to the store's doors.
    ("main.py", f"{STORE}.connection", "Connection"),
}
CLIENT_ATTRIBUTES = {"client", "pipeline", "register_script"}


def redis_uses(source: str, name: str) -> set[str]:
    """What the module ``name`` (its path under service/api/) takes of Redis itself."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found |= {f"import {a.name}" for a in node.names if a.name.split(".")[0] == "redis"}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "redis":
                found.add(f"from {node.module} import …")
            elif node.module in REDIS_MODULES:
                found |= {f"from {node.module} import {a.name}" for a in node.names
                          if (name, node.module, a.name) not in ALLOWED}
        elif isinstance(node, ast.Name) and node.id == "Keys":
            found.add(f"line {node.lineno}: Keys")
        elif isinstance(node, ast.Attribute) and node.attr in CLIENT_ATTRIBUTES:
            found.add(f"line {node.lineno}: .{node.attr}")
    return found


def test_api_modules_reach_redis_only_through_the_store() -> None:
    names = [str(path.relative_to(API)) for path in sorted(API.rglob("*.py"))]
    uses = {name: redis_uses((API / name).read_text(), name) for name in names}
    assert not {name: found for name, found in uses.items() if found}


def test_the_check_finds_a_route_that_reads_redis_itself() -> None:
    source = ("from redis.exceptions import RedisError\n"
              "from modelcompare.service.store.connection import UNAVAILABLE\n"
              "from modelcompare.service.store.keys import Keys\n"
              "async def evidence(store, cid):\n"
              "    return await store.client.get(Keys(store.prefix, cid).evidence)\n")
    assert redis_uses(source, "routes/evidence.py") == {
        "from redis.exceptions import …",
        "from modelcompare.service.store.connection import UNAVAILABLE",  # allowed in errors.py
        "from modelcompare.service.store.keys import Keys",
        "line 5: .client",
        "line 5: Keys",
    }
