"""The FastAPI application: Redis (given or embedded), pub/sub relay, optional inline worker."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.api import errors
from service.api.broadcast import Broadcaster
from service.api.deps import authorize, protected
from service.api.ingest import BodyLimit
from service.api.routes import (
    comparisons,
    dashboard,
    data,
    dead_letters,
    expectation,
    health,
    stream,
)
from service.core.config import Settings
from service.core.security import Keyring
from service.embedded import EmbeddedRedis
from service.metrics import Metrics
from service.store.comparisons import Comparisons
from service.worker import Worker


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with contextlib.ExitStack() as stack:
            url = settings.redis_url
            if url is None:
                embedded = EmbeddedRedis(settings.data_dir)
                stack.callback(embedded.close)
                url = embedded.url
            client = aioredis.Redis.from_url(url)
            app.state.settings = settings
            app.state.redis_url = url
            app.state.metrics = Metrics()
            app.state.store = Comparisons(client, settings.key_prefix, settings.idempotency_ttl)
            app.state.broadcaster = Broadcaster(client, settings.key_prefix)
            await app.state.broadcaster.start()
            if settings.runs_worker_inline:
                stack.enter_context(_inline_worker(url, settings, app.state.metrics))
            try:
                yield
            finally:
                await app.state.broadcaster.stop()
                await client.aclose()

    app = FastAPI(
        title="modelcompare",
        version="0.1.0",
        description="Streaming online Bayesian model comparison: running log evidence, "
        "posterior model probabilities and BMA predictions.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.state.keyring = Keyring(settings.api_keys) if settings.api_keys else None
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"])
    # Every router gets the API-key check (deps.authorize); it leaves public paths alone.
    for module in (comparisons, data, stream, health, dead_letters, dashboard, expectation):
        app.include_router(module.router, dependencies=[Depends(authorize)])
    if app.state.keyring is not None:
        _document_bearer_keys(app)
    return app


def _document_bearer_keys(app: FastAPI) -> None:
    """Declare the bearer key on the protected operations of the OpenAPI schema, so /docs has
    an "Authorize" button and generated clients send the header."""
    generate = app.openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()  # FastAPI keeps it as app.openapi_schema
            document.setdefault("components", {})["securitySchemes"] = {
                "apiKey": {"type": "http", "scheme": "bearer"}}
            for path, item in document["paths"].items():
                for operation in item.values() if protected(path) else ():
                    operation["security"] = [{"apiKey": []}]
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]


@contextlib.contextmanager
def _inline_worker(url: str, settings: Settings, metrics: Metrics) -> Iterator[Worker]:
    client = redis.Redis.from_url(url)
    stop = threading.Event()
    worker = Worker(client, settings, metrics=metrics)
    thread = threading.Thread(target=worker.run, args=(stop,), name="modelcompare-worker",
                              daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        stop.set()
        thread.join(timeout=30)
        client.close()
