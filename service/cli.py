"""``modelcompare serve | worker | demo``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence

from service.core.config import Settings


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("host", "port", "redis_url", "data_dir") and v is not None}
    settings = Settings(**overrides)
    if settings.torch_threads is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
    return settings


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from service.api.main import create_app

    settings = _settings(args)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=args.log_level)


def worker(args: argparse.Namespace) -> None:
    import redis
    from prometheus_client import start_http_server

    from service.metrics import Metrics
    from service.worker import Worker

    settings = _settings(args)
    if settings.redis_url is None:
        raise SystemExit("modelcompare worker needs REDIS_URL (or --redis-url)")
    metrics = Metrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    Worker(redis.Redis.from_url(settings.redis_url), settings, metrics=metrics).run(stop)


def demo(args: argparse.Namespace) -> None:
    from service.demo import run_demo

    run_demo(rows=args.rows, chunk=args.chunk, particles=args.particles, seed=args.seed,
             data_dir=args.data_dir)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="modelcompare", description="Streaming online Bayesian model comparison."
    )
    parser.add_argument("--log-level", default="info")
    commands = parser.add_subparsers(dest="command", required=True)
    p_serve = commands.add_parser("serve", help="HTTP API (embedded Redis + worker by default)")
    p_serve.add_argument("--host")
    p_serve.add_argument("--port", type=int)
    p_serve.add_argument("--redis-url")
    p_serve.add_argument("--data-dir")
    p_serve.set_defaults(run=serve)
    p_worker = commands.add_parser("worker", help="a standalone stream worker (needs REDIS_URL)")
    p_worker.add_argument("--redis-url")
    p_worker.add_argument("--metrics-port", type=int, default=0)
    p_worker.set_defaults(run=worker)
    p_demo = commands.add_parser("demo", help="stream data into four models, watch them race")
    p_demo.add_argument("--rows", type=int, default=3000)
    p_demo.add_argument("--chunk", type=int, default=250)
    p_demo.add_argument("--particles", type=int, default=64)
    p_demo.add_argument("--seed", type=int, default=0)
    p_demo.add_argument("--data-dir", default=None)
    p_demo.set_defaults(run=demo)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args.run(args)
