"""The paginated listing: newest first, a cursor that stays put under creates and deletes,
bounds, API-key filtering that still ends, and comparisons listed by an earlier version (only
in the plain index set) taken into the ordered index."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
from service_helpers import assert_error, comparison_body
from service_server import Server, StartServer

from modelcompare.service.cli import main
from modelcompare.service.client import AsyncClient, Client
from modelcompare.service.store.comparisons import Comparisons
from modelcompare.service.store.connection import Connection
from modelcompare.service.store.keys import created_key, index_key
from modelcompare.service.store.listing import decode_cursor


def _create(client: httpx.Client, name: str) -> str:
    response = client.post("/v1/comparisons", json={**comparison_body(), "name": name})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _walk(client: httpx.Client, limit: int, headers: dict[str, str] | None = None,
          ) -> tuple[list[str], list[dict[str, Any]]]:
    """Every page's ids in order, and the pages."""
    ids: list[str] = []
    pages = []
    cursor = None
    for _ in range(1000):
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        response = client.get("/v1/comparisons", params=params, headers=headers)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["comparisons"]) <= limit
        pages.append(page)
        ids += [c["id"] for c in page["comparisons"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids, pages
    raise AssertionError("the listing did not end")


def test_pages_are_newest_first_and_complete(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        made = [_create(client, f"c{i}") for i in range(7)]
        ids, pages = _walk(client, 3)
        assert ids == made[::-1]
        assert [len(p["comparisons"]) for p in pages] == [3, 3, 1]
        whole = client.get("/v1/comparisons").json()
        assert [c["id"] for c in whole["comparisons"]] == made[::-1]
        assert whole["next_cursor"] is None
        described = whole["comparisons"][0]
        assert described == client.get(f"/v1/comparisons/{made[-1]}").json()
        exact = client.get("/v1/comparisons", params={"limit": 7}).json()
        assert len(exact["comparisons"]) == 7 and exact["next_cursor"] is None


def test_the_cursor_holds_under_creates_and_deletes(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        made = [_create(client, f"c{i}") for i in range(8)]
        newest_first = made[::-1]
        first = client.get("/v1/comparisons", params={"limit": 3}).json()
        assert [c["id"] for c in first["comparisons"]] == newest_first[:3]
        fresh = [_create(client, f"new{i}") for i in range(2)]  # newer: before the cursor
        gone = [newest_first[1], newest_first[5]]  # one already seen, one not yet
        for cid in gone:
            assert client.delete(f"/v1/comparisons/{cid}").status_code == 204
        rest: list[str] = []
        cursor = first["next_cursor"]
        while cursor is not None:
            page = client.get("/v1/comparisons", params={"limit": 3, "cursor": cursor}).json()
            rest += [c["id"] for c in page["comparisons"]]
            cursor = page["next_cursor"]
        assert rest == [cid for cid in newest_first[3:] if cid not in gone]
        assert not set(rest) & set(fresh)
        again, _ = _walk(client, 4)
        assert again == fresh[::-1] + [cid for cid in newest_first if cid not in gone]


@pytest.mark.slow
def test_limit_and_cursor_bounds(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        _create(client, "only")
        for limit in (0, -1, 501, "many"):
            assert_error(client.get("/v1/comparisons", params={"limit": limit}), 422)
        assert client.get("/v1/comparisons", params={"limit": 500}).status_code == 200
        for cursor in ("not-a-cursor", base64.urlsafe_b64encode(b'["x", 1]').decode(),
                       "x" * 201):
            assert_error(client.get("/v1/comparisons", params={"cursor": cursor}), 422)
        schema = client.get("/openapi.json").json()
        params = {p["name"]: p for p in schema["paths"]["/v1/comparisons"]["get"]["parameters"]}
        assert params["limit"]["schema"]["default"] == 50
        assert params["limit"]["schema"]["maximum"] == 500
        body = schema["components"]["schemas"]["ComparisonList"]
        assert {"comparisons", "next_cursor"} <= set(body["required"])


def test_equal_creation_times_page_once_each(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    store = server.redis()
    with server.client() as client:
        made = [_create(client, f"tie{i}") for i in range(5)]
        store.zadd(created_key(server.settings.key_prefix), {cid: 1e9 for cid in made[1:4]})
        ids, _ = _walk(client, 1)
        assert sorted(ids) == sorted(made) and len(ids) == 5
        assert ids[:2] == [made[4], made[0]]  # the tied three come last, in descending id order
        assert ids[2:] == sorted(made[1:4], reverse=True)


def _secured(start_server: StartServer, visible: int, hidden: int,
             ) -> tuple[Server, list[str], list[str]]:
    open_server = start_server("local", embedded_worker=False)
    seen, unseen = [], []
    with open_server.client() as client:
        for i in range(visible + hidden):
            if i % ((visible + hidden) // visible) == 0 and len(seen) < visible:
                seen.append(_create(client, f"team-{i}"))
            else:
                unseen.append(_create(client, f"other-{i}"))
    keys = {"admin": {"read": ["*"], "write": ["*"]}, "team": {"read": ["team-*"]}}
    server = start_server("local", embedded_worker=False,
                          key_prefix=open_server.settings.key_prefix, api_keys=keys)
    return server, seen, unseen


def test_a_scoped_key_pages_through_what_it_may_read(start_server: StartServer) -> None:
    server, seen, unseen = _secured(start_server, 3, 12)
    with server.client() as client:
        team = {"Authorization": "Bearer team"}
        ids, pages = _walk(client, 2, team)
        assert ids == seen[::-1]
        admin, _ = _walk(client, 4, {"Authorization": "Bearer admin"})
        assert sorted(admin) == sorted(seen + unseen)
        for page in pages:  # a cursor names only comparisons the key may read
            if page["next_cursor"] is not None:
                assert decode_cursor(page["next_cursor"])[1] in {"", *seen}


def test_a_scope_that_hides_most_still_ends_a_few_at_a_time(start_server: StartServer) -> None:
    """Each page looks at a bounded number of comparisons: pages may come back short or empty,
    the cursor moves on, the walk ends with every visible comparison once, and a cursor never
    names a hidden one."""
    server, seen, _ = _secured(start_server, 2, 18)

    async def walk() -> tuple[list[str], int]:
        client = Connection.detect(server.redis_url).async_client()
        try:
            return await pages_of(Comparisons(client, server.settings.key_prefix, 60.0))
        finally:
            await client.aclose()

    async def pages_of(store: Comparisons) -> tuple[list[str], int]:
        found, cursor, pages = [], None, 0
        while True:
            page = await store.page(5, cursor, lambda cid, name: name.startswith("team-"),
                                    examine=4)
            pages += 1
            found += [m.spec.id for m in page.comparisons]
            cursor = page.next_cursor
            if cursor is None:
                return found, pages
            assert decode_cursor(cursor)[1] in {"", *seen}
            assert pages < 50

    found, pages = asyncio.run(walk())
    assert found == seen[::-1]
    assert pages >= 5  # 20 comparisons, 4 looked at per page


def test_comparisons_listed_before_the_ordered_index_are_taken_in(
        start_server: StartServer) -> None:
    """An earlier version kept only the set: the first listing adds them, by creation time."""
    server = start_server("local", embedded_worker=False)
    store = server.redis()
    prefix = server.settings.key_prefix
    with server.client() as client:
        made = [_create(client, f"old{i}") for i in range(4)]
        store.delete(created_key(prefix))  # as an earlier version left them
        newer = _create(client, "new")
        assert store.zcard(created_key(prefix)) == 1
        ids, _ = _walk(client, 2)
        assert ids == [newer, *made[::-1]]
        assert store.zcard(created_key(prefix)) == store.scard(index_key(prefix)) == 5
        # an id left in the ordered index whose comparison is gone is dropped
        store.zadd(created_key(prefix), {"0" * 32: 1.0})
        store.srem(index_key(prefix), made[0])
        store.delete(f"{prefix}:{{cmp:{made[0]}}}:meta")
        ids, _ = _walk(client, 10)
        assert ids == [newer, *made[:0:-1]]
        assert store.zcard(created_key(prefix)) == 4


def test_a_cursor_is_opaque_text(start_server: StartServer) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        for i in range(3):
            _create(client, f"c{i}")
        cursor = client.get("/v1/comparisons", params={"limit": 1}).json()["next_cursor"]
        assert isinstance(cursor, str) and cursor.isascii() and "=" not in cursor
        score, cid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        assert isinstance(score, float) and len(cid) == 32


def test_the_client_and_the_cli_follow_the_pages(start_server: StartServer,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server("local", embedded_worker=False)
    with server.client() as client:
        made = [_create(client, f"c{i}") for i in range(5)]
    with Client(server.url) as api:
        page = api.list_comparisons(limit=2)
        assert [c["id"] for c in page["comparisons"]] == made[:-3:-1]
        assert [c["id"] for c in api.iter_comparisons(limit=2)] == made[::-1]

    async def every() -> list[str]:
        async with AsyncClient(server.url) as api:
            return [c["id"] async for c in api.iter_comparisons(limit=3)]

    assert asyncio.run(every()) == made[::-1]
    main(["list", "--url", server.url])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == made[::-1]
    main(["list", "--limit", "2", "--url", server.url])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == made[:-3:-1]
    with pytest.raises(SystemExit):
        main(["list", "--limit", "0", "--url", server.url])
