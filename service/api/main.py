"""The FastAPI application: Redis (given or embedded), pub/sub relay, optional inline worker."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

import redis
import redis.asyncio as aioredis
from fastapi import FastAPI

from service.api import errors
from service.api.broadcast import Broadcaster
from service.api.routes import comparisons, data, health, stream
from service.core.config import Settings
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
    for module in (comparisons, data, stream, health):
        app.include_router(module.router)
    return app


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
