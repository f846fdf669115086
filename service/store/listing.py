"""The listing of comparisons, newest first, in pages: a sorted set of ids by creation time
(``keys.created_key``) beside the set every create writes (``keys.index_key``), and opaque cursors
of (creation time, id)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelcompare.service.store.keys import created_key, index_key
from modelcompare.service.store.meta import META_FIELDS, Meta, meta_from_fields

if TYPE_CHECKING:
    from modelcompare.service.store.comparisons import Comparisons


class BadCursor(ValueError):
    """A listing cursor this service did not make."""


@dataclass(frozen=True)
class Page:
    """One page of the listing, newest first; ``next_cursor`` None at the end."""

    comparisons: list[Meta]
    next_cursor: str | None


def encode_cursor(score: float, cid: str) -> str:
    """The listing's position after (``score``, ``cid``): opaque to clients."""
    raw = json.dumps([score, cid], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, cid = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise BadCursor(f"{cursor!r} is not a cursor of this listing") from None
    if (not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score)
            or not isinstance(cid, str)):
        raise BadCursor(f"{cursor!r} is not a cursor of this listing")
    return float(score), cid



async def page(store: Comparisons, limit: int, cursor: str | None = None,
           visible: Callable[[str, str], bool] | None = None,
           examine: int = 1000) -> Page:
    """Up to ``limit`` comparisons, newest first, after ``cursor`` (from an earlier page's
    ``next_cursor``). ``visible(id, name)`` filters (None: all); a page examines at most
    about ``examine`` comparisons, so under a filter that hides most of them a page may
    hold fewer than ``limit`` (even none) and still have a ``next_cursor``. The position is
    (creation time, id): comparisons created or deleted meanwhile neither shift nor repeat
    the rest of the listing."""
    await reconcile_index(store)
    after = None if cursor is None else decode_cursor(cursor)
    top: float | str = "+inf" if after is None else after[0]
    batch = limit + 1 if visible is None else max(limit + 1, min(examine, 200))
    found: list[Meta] = []
    examined, offset, last_score = 0, 0, None
    last_visible: tuple[float, str] | None = None
    while True:
        rows = await store.client.zrange(created_key(store.prefix), top, "-inf", desc=True,
                                        byscore=True, offset=offset, num=batch,
                                        withscores=True)
        offset += len(rows)
        entries = [(member.decode(), float(score)) for member, score in rows]
        if after is not None:  # equal scores come in descending id order
            entries = [(cid, score) for cid, score in entries
                       if score != after[0] or cid < after[1]]
        pipe = store.client.pipeline(transaction=False)
        for cid, _ in entries:
            pipe.hmget(store.keys(cid).meta, *META_FIELDS)
        metas = await pipe.execute() if entries else []
        for (cid, score), fields in zip(entries, metas, strict=True):
            if len(found) == limit:  # a full page, and another comparison after it
                assert last_visible is not None
                return Page(found, encode_cursor(*last_visible))
            if examined >= examine and score != last_score:
                # every comparison at last_score was examined: go on below it
                return Page(found, encode_cursor(last_score, ""))
            examined += 1
            last_score = score
            if fields[0] is None:
                continue  # deleted meanwhile
            if visible is not None and not visible(cid, json.loads(fields[0])["name"]):
                continue
            meta = meta_from_fields(fields)
            if meta is not None:
                found.append(meta)
                last_visible = (score, cid)
        if len(rows) < batch:
            return Page(found, None)

async def reconcile_index(store: Comparisons) -> int:
    """List in ``created_key`` the comparisons only ``index_key`` has (created by a version
    without it, or by a create still under way), and drop from it the ids whose comparison
    is gone; a no-op (two counts) while both hold as many. Returns the ids added."""
    client = store.client
    ordered, members = created_key(store.prefix), index_key(store.prefix)
    if await client.scard(members) == await client.zcard(ordered):
        return 0
    indexed = {m.decode() for m in await client.smembers(members)}
    listed = {m.decode() for m in await client.zrange(ordered, 0, -1)}
    missing, extra = sorted(indexed - listed), sorted(listed - indexed)
    pipe = client.pipeline(transaction=False)
    for cid in (*missing, *extra):
        pipe.hget(store.keys(cid).meta, "spec")
    specs = await pipe.execute() if missing or extra else []
    added = {cid: float(json.loads(spec)["created_at"])
             for cid, spec in zip(missing, specs, strict=False) if spec is not None}
    if added:
        await client.zadd(ordered, added, nx=True)
    gone = [cid for cid, spec in zip(extra, specs[len(missing):], strict=True)
            if spec is None]
    if gone:
        await client.zrem(ordered, *gone)
    return len(added)

