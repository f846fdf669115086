"""The FastAPI application: Redis (given or embedded), pub/sub relay, optional inline worker."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from modelcompare.service.api import errors, openapi
from modelcompare.service.api.broadcast import Broadcaster
from modelcompare.service.api.deps import authorize
from modelcompare.service.api.inflight import Inflight, InflightLimit, map_large_allocations
from modelcompare.service.api.ingest import BodyLimit
from modelcompare.service.api.routes import (
    comparisons,
    dashboard,
    data,
    dead_letters,
    docs,
    expectation,
    families,
    health,
    rules,
    stream,
    webhooks,
)
from modelcompare.service.api.shutdown import Shutdown
from modelcompare.service.core.config import Settings
from modelcompare.service.core.security import Keyring
from modelcompare.service.embedded import EmbeddedRedis
from modelcompare.service.metrics import Metrics
from modelcompare.service.store.comparisons import Comparisons
from modelcompare.service.store.connection import Connection
from modelcompare.service.store.dead_letters import DeadLetters
from modelcompare.service.store.deliveries import Deliveries
from modelcompare.service.store.health import Readiness
from modelcompare.service.store.rules import Rules
from modelcompare.service.store.updates import UpdateFeed
from modelcompare.service.worker_process import WorkerProcess

REDIS_STARTUP_WAIT = 30.0  # seconds the API waits for Redis to answer when it starts


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
            # A busy pool makes a request wait (up to redis_pool_timeout) for a connection
            # instead of failing at once; past that the request gets 503.
            connection = Connection.detect(url, wait=REDIS_STARTUP_WAIT,
                                           socket_timeout=settings.redis_socket_timeout)
            client = connection.pooled_async_client(settings.redis_pool_size,
                                                    settings.redis_pool_timeout)
            app.state.settings = settings
            app.state.redis_url = url
            app.state.metrics = Metrics()
            app.state.store = Comparisons(client, settings.key_prefix, settings.idempotency_ttl)
            app.state.dead_letters = DeadLetters(client, settings.key_prefix)
            app.state.rules = Rules(client, settings.key_prefix)
            app.state.deliveries = Deliveries(client, settings.key_prefix)
            app.state.readiness = Readiness(client)
            app.state.broadcaster = Broadcaster(UpdateFeed(client, settings.key_prefix))
            await app.state.broadcaster.start()
            app.state.shutdown.on_begin(app.state.broadcaster.close)
            if settings.runs_worker_inline:
                stack.enter_context(
                    _inline_worker(connection, settings, app.state.metrics, app.state.shutdown)
                )
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
        docs_url=None,  # served from bundled assets by routes/docs.py
        redoc_url=None,
        generate_unique_id_function=openapi.operation_id,
    )
    errors.install(app)
    app.state.shutdown = Shutdown(settings.shutdown_timeout)
    app.state.keyring = Keyring(settings.api_keys) if settings.api_keys else None
    # BodyLimit is added last, so it runs first: a body over the limit gets 413, never 503.
    app.state.inflight = Inflight(settings.max_inflight_bytes)
    map_large_allocations()
    app.add_middleware(InflightLimit, inflight=app.state.inflight)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes,
                       query_limit=settings.max_query_body_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
        )
    # Every router gets the API-key check (deps.authorize); it leaves public paths alone.
    for module in (comparisons, families, data, stream, health, dead_letters, rules, webhooks,
                   dashboard, docs, expectation):
        app.include_router(module.router, dependencies=[Depends(authorize)])
    openapi.install(app, api_keys=app.state.keyring is not None)
    return app


@contextlib.contextmanager
def _inline_worker(
    connection: Connection, settings: Settings, metrics: Metrics, shutdown: Shutdown
) -> Iterator[WorkerProcess]:
    """The worker's lanes, run from a thread; they stop when shutdown begins and are waited for
    until its deadline (daemon threads: the process may exit during an update, recomputed on
    the next start)."""
    client = connection.sync_client()
    stop = threading.Event()
    shutdown.on_begin(stop.set)
    worker = WorkerProcess(client, settings, metrics=metrics)
    thread = threading.Thread(
        target=worker.run, args=(stop,), name="modelcompare-worker", daemon=True
    )
    thread.start()
    try:
        yield worker
    finally:
        stop.set()
        thread.join(timeout=shutdown.remaining())
        client.close()
