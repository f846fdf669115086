"""Reading a comparison's progress record on the API side (asyncio client; the worker's read is
``Queue.snapshot``): the stored record at the meta's version, or, for a comparison stored
before records existed, the one its evidence body describes (service/migration.py)."""

from __future__ import annotations

import json

from modelcompare.service.migration import progress_from_body
from modelcompare.service.progress import ComparisonProgress, current
from modelcompare.service.store.connection import AsyncClient
from modelcompare.service.store.keys import Keys


async def read_progress(client: AsyncClient, keys: Keys) -> ComparisonProgress | None:
    """None when the comparison is gone."""
    pipe = client.pipeline(transaction=True)
    pipe.hget(keys.meta, "version")
    pipe.get(keys.progress)
    pipe.get(keys.evidence)
    version, raw, body = await pipe.execute()
    progress = None if version is None else current(raw, int(version))
    if progress is None and version is not None and body is not None:
        return progress_from_body(json.loads(body))
    return progress
