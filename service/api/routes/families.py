"""The model families this server can build: built-in and plugin ones, with the package that
provides each, its version and the JSON schema of its ``config``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from modelcompare.models import families
from modelcompare.service.api.responses import FamilyList

router = APIRouter(tags=["families"])


@router.get("/v1/families", response_model=FamilyList)
async def list_families() -> dict[str, Any]:
    """Every family a comparison may use here, by name; plugins that failed to load are listed
    under ``unavailable`` with the reason (their families cannot be used)."""
    known = families()
    return {"families": [known.known[name].public() for name in sorted(known.known)],
            "unavailable": dict(sorted(known.broken.items()))}
