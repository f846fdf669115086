"""Dead-lettered (poison) chunks: list them; resume a comparison halted on one."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict

from modelcompare.service.api.deps import DeadLettersDep, RequestIdentity, SettingsDep
from modelcompare.service.api.errors import ApiError, error_responses
from modelcompare.service.api.ingest import json_body
from modelcompare.service.api.responses import DeadLetterList, Evidence, returns
from modelcompare.service.store.dead_letters import NotHalted, ResumeAction

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["dead letters"])


class ResumeIn(BaseModel):
    """``retry`` the halted chunk (e.g. after a fix), or ``skip`` it (its rows are left out)."""

    model_config = ConfigDict(extra="forbid")
    action: ResumeAction


@router.get("/dead-letters", **returns(DeadLetterList),
            responses=error_responses(404, 422, 503))
async def list_dead_letters(
    cid: str, letters: DeadLettersDep, settings: SettingsDep,
    limit: int = Query(default=100, ge=1, le=10_000),
) -> dict[str, Any]:
    """Chunks given up on after ``poison_max_attempts`` failed updates, oldest first."""
    halted_at = await letters.halted_at(cid)
    return {
        "halted_at": halted_at,
        "policy": settings.poison_policy,
        "max_attempts": settings.poison_max_attempts,
        "dead_letters": [dataclasses.asdict(r) for r in await letters.list(cid, limit)],
    }


@router.post("/resume", **returns(Evidence), dependencies=[Depends(json_body)],
             responses=error_responses(400, 404, 409, 413, 415, 422, 503))
async def resume(cid: str, body: ResumeIn, letters: DeadLettersDep,
                 request: RequestIdentity) -> dict[str, Any]:
    """Un-halt a comparison; returns the evidence body (status as it now stands)."""
    try:
        return await letters.resume(cid, body.action, request)
    except NotHalted:
        raise ApiError(409, "not_halted", "the comparison is not halted", {"id": cid}) from None
    except TimeoutError:
        raise ApiError(409, "busy", "the comparison kept changing; retry", {"id": cid}) from None
