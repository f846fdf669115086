"""The base of every response body: fields may be added, never renamed (DESIGN.md), so a body
allows more properties than it lists."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")
