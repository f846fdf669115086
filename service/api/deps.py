"""Request dependencies (``Annotated`` aliases): settings, store, broadcaster, metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from service.api.broadcast import Broadcaster
from service.core.config import Settings
from service.metrics import Metrics
from service.store.comparisons import Comparisons


def get_settings(connection: HTTPConnection) -> Settings:
    return connection.app.state.settings


def get_store(connection: HTTPConnection) -> Comparisons:
    return connection.app.state.store


def get_broadcaster(connection: HTTPConnection) -> Broadcaster:
    return connection.app.state.broadcaster


def get_metrics(connection: HTTPConnection) -> Metrics:
    return connection.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Comparisons, Depends(get_store)]
BroadcasterDep = Annotated[Broadcaster, Depends(get_broadcaster)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
