"""Decision rules of a comparison (add, list, remove) and the events they made
(docs/guide/decisions.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Response

from modelcompare.service.api.changes import retried
from modelcompare.service.api.deps import RequestIdentity, RulesDep, SettingsDep, StoreDep
from modelcompare.service.api.errors import ApiError, error_responses, not_found
from modelcompare.service.api.ingest import json_body
from modelcompare.service.api.responses import returns
from modelcompare.service.api.routes.webhooks import check_webhooks
from modelcompare.service.api.rule_responses import EventPage, RuleList, RuleStatus
from modelcompare.service.core.config import Settings
from modelcompare.service.evidence import evidence_body
from modelcompare.service.limits import LimitExceeded
from modelcompare.service.progress import ComparisonProgress, RuleState
from modelcompare.service.reducers import next_version, without_rule_state
from modelcompare.service.rules import RuleIn, RuleSpec, unknown_models
from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.comparisons import Comparisons
from modelcompare.service.store.rules import Rules

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["decisions"])

EVENTS_LIMIT, EVENTS_LIMIT_MAX = 100, 1000  # events per page: default, maximum


def rule_status(rule: RuleSpec, state: RuleState) -> dict[str, Any]:
    return {**rule.public(),
            "firing": state.firing, "streak": state.streak, "best": state.best}


def check_rule(rule: RuleIn, spec: ComparisonSpec, settings: Settings) -> None:
    """422 when ``rule`` names a model ``spec`` lacks or takes it past a limit; 409 when its
    name is taken."""
    if any(r.name == rule.name for r in spec.rules):
        raise ApiError(409, "conflict", f"rule {rule.name!r} exists", {"rule": rule.name})
    unknown = unknown_models(rule, [m.name for m in spec.models])
    if unknown:
        raise ApiError(422, "invalid_request", f"rule {rule.name!r} names models the comparison "
                       f"lacks: {', '.join(unknown)}", {"rule": rule.name, "models": unknown})
    try:
        settings.limits.check_rules([*spec.rules, rule])
    except LimitExceeded as exc:
        raise ApiError(422, "limit_exceeded", str(exc), exc.details) from None


Change = Callable[[ComparisonSpec], tuple[ComparisonSpec, str]]


async def _change(cid: str, store: Comparisons, rules: Rules, request: str,
                  change: Change) -> tuple[ComparisonSpec, ComparisonProgress]:
    """Apply ``change(spec) -> (spec, rule name)`` with a compare-and-set on the version,
    retried while the comparison changes under it; the changed rule starts from no state."""
    async def attempt() -> tuple[ComparisonSpec, ComparisonProgress] | None:
        meta = await store.meta(cid)
        spec, name = change(meta.spec)
        current = await store.progress(cid)
        if current.version != meta.version:
            return None
        progress = next_version(without_rule_state(current, name))
        result = await rules.change(meta.version, spec, progress, evidence_body(spec, progress),
                                    request)
        if result == -1:
            raise not_found(cid)
        return (spec, progress) if result == 1 else None

    return await retried(cid, attempt)


@router.post("/rules", status_code=201, **returns(RuleStatus), dependencies=[Depends(json_body)],
             responses=error_responses(400, 404, 409, 413, 415, 422, 503))
async def add_rule(cid: str, body: RuleIn, store: StoreDep, rules: RulesDep,
                   settings: SettingsDep, request: RequestIdentity) -> dict[str, Any]:
    """Add a decision rule; it is evaluated from the next applied chunk on."""
    await check_webhooks([body], settings)
    rule = body.spec(time.time())

    def added(spec: ComparisonSpec) -> tuple[ComparisonSpec, str]:
        check_rule(body, spec, settings)
        return spec.model_copy(update={"rules": [*spec.rules, rule]}), rule.name

    await _change(cid, store, rules, request, added)
    return rule_status(rule, RuleState())


@router.get("/rules", **returns(RuleList), responses=error_responses(404, 503))
async def list_rules(cid: str, store: StoreDep) -> dict[str, Any]:
    """The rules with where each stands."""
    progress = await store.progress(cid)
    meta = await store.meta(cid)
    return {"rules": [rule_status(r, progress.rules.get(r.name, RuleState()))
                      for r in meta.spec.rules], "version": progress.version}


@router.delete("/rules/{name}", status_code=204, responses=error_responses(404, 409, 503))
async def remove_rule(cid: str, name: str, store: StoreDep, rules: RulesDep,
                      request: RequestIdentity) -> Response:
    """Remove a rule; its events stay."""
    def removed(spec: ComparisonSpec) -> tuple[ComparisonSpec, str]:
        if all(r.name != name for r in spec.rules):
            raise ApiError(404, "not_found", f"no rule {name!r} in comparison {cid!r}",
                           {"id": cid, "rule": name})
        return spec.model_copy(update={"rules": [r for r in spec.rules if r.name != name]}), name

    await _change(cid, store, rules, request, removed)
    return Response(status_code=204)


@router.get("/events", **returns(EventPage), responses=error_responses(404, 422, 503))
async def list_events(
    cid: str, rules: RulesDep,
    after: int = Query(0, ge=0, description="only events of chunks after this sequence"),
    limit: int = Query(EVENTS_LIMIT, ge=1, le=EVENTS_LIMIT_MAX,
                       description="events per page at least (a page ends with every event "
                       "of its last chunk)"),
) -> dict[str, Any]:
    """Events of the decision rules, oldest first, a page at a time: follow ``next_after``
    until it is null. The newest MODELCOMPARE_EVENTS_KEPT are kept."""
    events = await rules.events(cid, after, limit)
    return {"events": [e.public() for e in events],
            "next_after": events[-1].sequence if len(events) >= limit else None}
