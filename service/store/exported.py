"""What /metrics reads of each comparison it exports (asyncio client): the newest ones only, so
that the number of label values stays bounded (``Settings.metrics_max_comparisons``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from modelcompare.service.progress import decode
from modelcompare.service.store.connection import AsyncClient
from modelcompare.service.store.keys import Keys, created_key


@dataclass(frozen=True)
class Exported:
    """One comparison's evidence body, its rules' states (firing or not) and the decision
    events it has stored in all."""

    cid: str
    evidence: dict[str, Any]
    firing: dict[str, bool]
    events: int


async def exported(client: AsyncClient, prefix: str, limit: int) -> list[Exported]:
    """The ``limit`` newest comparisons (fewer when some were deleted meanwhile)."""
    if limit <= 0:
        return []
    ids = [m.decode() for m in await client.zrevrange(created_key(prefix), 0, limit - 1)]
    pipe = client.pipeline(transaction=False)
    for cid in ids:
        keys = Keys(prefix, cid)
        pipe.get(keys.evidence)
        pipe.get(keys.progress)
        pipe.hget(keys.meta, "events")
    replies = await pipe.execute() if ids else []
    found = []
    for index, cid in enumerate(ids):
        evidence, progress, events = replies[3 * index: 3 * index + 3]
        if evidence is None:
            continue
        rules = {} if progress is None else decode(progress).rules
        found.append(Exported(cid, json.loads(evidence),
                              {name: state.firing for name, state in rules.items()},
                              int(events or 0)))
    return found
