"""Webhooks of decision rules: the comparison's signing secret, and the deliveries waiting or
given up on (docs/guide/decisions.md#webhooks). ``check_webhooks`` holds a rule's URL to the
operator's allowlist when the rule is created."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import APIRouter, Query

from modelcompare.service.api.deps import DeliveriesDep, RequestIdentity, SettingsDep
from modelcompare.service.api.errors import ApiError, error_responses
from modelcompare.service.api.responses import returns
from modelcompare.service.api.rule_responses import DeliveryList, DeliveryOut, WebhookSecret
from modelcompare.service.core.config import Settings
from modelcompare.service.rules import RuleIn
from modelcompare.service.store.deliveries import NO_SUCH_DELIVERY, OUTBOX_FULL
from modelcompare.service.webhooks.targets import TargetRefused, check

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["decisions"])

DELIVERIES_LIMIT, DELIVERIES_LIMIT_MAX = 100, 1000


async def check_webhooks(rules: Sequence[RuleIn], settings: Settings) -> None:
    """422 when a rule's webhook host does not resolve within the webhook timeout, or
    resolves to an address the operator does not allow."""
    for rule in rules:
        if rule.webhook is None:
            continue
        try:
            await asyncio.wait_for(asyncio.to_thread(check, rule.webhook,
                                                     settings.webhook_allowlist),
                                   settings.webhook_timeout)
        except TargetRefused as exc:
            raise ApiError(422, "invalid_request", f"rule {rule.name!r}: webhook refused: {exc}",
                           {"rule": rule.name, "webhook": rule.webhook}) from None
        except TimeoutError:
            raise ApiError(422, "invalid_request", f"rule {rule.name!r}: the webhook's host did "
                           f"not resolve within {settings.webhook_timeout} s",
                           {"rule": rule.name, "webhook": rule.webhook}) from None


@router.get("/webhook-secret", **returns(WebhookSecret), responses=error_responses(404, 503))
async def get_webhook_secret(cid: str, deliveries: DeliveriesDep) -> dict[str, Any]:
    """The secret that signs the comparison's webhook deliveries (made when first asked for or
    needed). With API keys, reading it needs write access."""
    return {"secret": await deliveries.secret(cid)}


@router.post("/webhook-secret", **returns(WebhookSecret), responses=error_responses(404, 503))
async def rotate_webhook_secret(cid: str, deliveries: DeliveriesDep,
                                request: RequestIdentity) -> dict[str, Any]:
    """A new secret: tries from now on are signed with it (a receiver accepts both while it
    switches over)."""
    return {"secret": await deliveries.rotate(cid, request)}


@router.get("/deliveries", **returns(DeliveryList), responses=error_responses(404, 422, 503))
async def list_deliveries(
    cid: str, deliveries: DeliveriesDep,
    state: Literal["pending", "dead"] = Query("pending", description="waiting for a try, or "
                                               "given up on after webhook_max_attempts"),
    limit: int = Query(DELIVERIES_LIMIT, ge=1, le=DELIVERIES_LIMIT_MAX),
) -> dict[str, Any]:
    """Webhook deliveries waiting (the soonest due first) or dead (the newest first; the
    newest MODELCOMPARE_DEAD_DELIVERIES_KEPT are kept)."""
    found = await deliveries.list(cid, state, limit)
    return {"state": state, "deliveries": [record.public() for record in found]}


@router.post("/deliveries/{delivery}/replay", **returns(DeliveryOut),
             responses=error_responses(404, 409, 503))
async def replay_delivery(cid: str, delivery: str, deliveries: DeliveriesDep,
                          settings: SettingsDep, request: RequestIdentity) -> dict[str, Any]:
    """A dead delivery waits again, due now, with its tries counted from zero."""
    record = await deliveries.dead(cid, delivery)
    replayed = None if record is None else record.replayed(time.time())
    result = NO_SUCH_DELIVERY if replayed is None else await deliveries.replay(
        cid, replayed, settings.webhook_outbox_max, request)
    if replayed is None or result == NO_SUCH_DELIVERY:
        raise ApiError(404, "not_found", f"no dead delivery {delivery!r} in comparison {cid!r}",
                       {"id": cid, "delivery": delivery})
    if result == OUTBOX_FULL:
        raise ApiError(409, "busy", f"{settings.webhook_outbox_max} deliveries of the "
                       "comparison wait already; replay when fewer do",
                       {"id": cid, "delivery": delivery})
    return replayed.public()
