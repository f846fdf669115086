"""``modelcompare watch``: decision events printed as they come, ``--until RULE`` exits 0 when
the rule fires, at once when it is firing already, and fails naming the rules for an unknown
one."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httpx
import pytest
from service_helpers import chunks, comparison_body, regression_data, run_cli
from service_server import Server, StartServer

from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.watch import follow

AHEAD = {"name": "ahead", "for_chunks": 2, "when": {"log_bayes_factor": {
    "model": "right", "against": "wrong_noise", "above": 0.0}}}


def arguments(server: Server, cid: str, until: str | None) -> argparse.Namespace:
    return argparse.Namespace(comparison=cid, url=server.url, api_key=None, count=0,
                              until=until)


async def watch_while_sending(server: Server, cid: str, part: dict[str, Any]) -> list[str]:
    said: list[str] = []
    snapshot = asyncio.Event()
    task = asyncio.create_task(follow(arguments(server, cid, "ahead"),
                                      lambda table: snapshot.set(), said.append))
    await asyncio.wait_for(snapshot.wait(), 60)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        reply = await client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=part)
        assert reply.status_code == 200
    await asyncio.wait_for(task, 60)
    return said


def test_watch_until_a_rule_fires(start_server: StartServer,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server("local")
    x, y = regression_data(40)
    first, second = chunks(x, y, 20)
    with server.client() as client:
        body = {**comparison_body("exact"), "rules": [AHEAD]}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=first).is_success
    said = asyncio.run(watch_while_sending(server, cid, second))
    assert len(said) == 1 and said[0].startswith("rule ahead fired after chunk 2 (40 rows): "
                                                 "value ")
    status, out, err = run_cli(capsys, "watch", cid, "--until", "ahead", "--url", server.url)
    assert status == 0, err
    assert "rule ahead is firing" in out
    with pytest.raises(CliError, match=r"has no rule 'nope' \(its rules: ahead\)"):
        asyncio.run(follow(arguments(server, cid, "nope"), print, print))
