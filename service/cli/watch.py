"""``modelcompare watch``: a comparison's evidence live from the websocket, a line per decision
event, and ``--until RULE`` for scripts: exit 0 once the rule fires."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.tables import evidence_table, formulas
from modelcompare.service.client import AsyncClient


def event_line(event: dict[str, Any]) -> str:
    """One line: the rule, fired or cleared, the chunk and rows, and the figures."""
    figures = ", ".join(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                        for name, value in event["figures"].items())
    return (f"rule {event['rule']} {event['kind']} after chunk {event['sequence']} "
            f"({event['n_observations']} rows): {figures}")


async def _firing(api: AsyncClient, cid: str, rule: str) -> bool:
    """Whether ``rule`` is firing now; CliError naming the rules there are when it is not one."""
    rules = {r["name"]: r["firing"] for r in (await api.rules(cid))["rules"]}
    if rule not in rules:
        raise CliError(f"comparison {cid} has no rule {rule!r} (its rules: "
                       f"{', '.join(rules) or 'none'})")
    return rules[rule]


async def follow(args: argparse.Namespace, show: Callable[[Any], None],
                 say: Callable[[str], None]) -> None:
    """Show each evidence message and say each event until ``args.count`` evidence messages,
    or until ``args.until`` fires (at once when it is firing when the snapshot arrives)."""
    cid = args.comparison
    async with AsyncClient(args.url, args.api_key) as api:
        shown = formulas(await api.get_comparison(cid))
        seen = 0
        async for message in api.updates(cid):
            if message["type"] == "deleted":
                raise CliError(f"comparison {cid} was deleted")
            if message["type"] == "event":
                say(event_line(message["event"]))
                if (message["event"]["rule"], message["event"]["kind"]) == (args.until, "fired"):
                    return
                continue
            show(evidence_table(message["evidence"], shown))
            # after the snapshot: an event before it is in the rule's state, one after on the
            # websocket
            if message["type"] == "snapshot" and args.until and await _firing(api, cid,
                                                                              args.until):
                say(f"rule {args.until} is firing")
                return
            seen += 1
            if seen == args.count and not args.until:
                return
    if args.until:
        raise CliError(f"the stream ended before rule {args.until} fired")


def watch(args: argparse.Namespace) -> None:
    """A live table fed by the websocket (in a terminal; elsewhere one table per message), with
    a line per decision event; ``--count N`` stops after N messages, ``--until RULE`` when the
    rule fires."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if not console.is_terminal:
        asyncio.run(follow(args, console.print, console.print))
        return
    with Live(console=console, auto_refresh=False) as live:
        asyncio.run(follow(args, lambda table: live.update(table, refresh=True),
                           live.console.print))
