"""``modelcompare serve | worker | demo``: the processes, as opposed to the client commands."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from modelcompare.service.cli.errors import CliError
from modelcompare.service.core.config import Settings
from modelcompare.service.embedded import DataFolderInUse, check_data_folder


def settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment, overridden by the options given."""
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("host", "port", "redis_url", "data_dir") and v is not None}
    loaded = Settings(**overrides)
    if loaded.torch_threads is not None:
        import torch

        torch.set_num_threads(loaded.torch_threads)
    return loaded


def worker_threads(loaded: Settings) -> int:
    """Torch threads of a ``modelcompare worker``: MODELCOMPARE_TORCH_THREADS, else 1. Workers
    scale by process (several share a host), and a chunk's tensors are too small for threads
    to pay: more only compete for the cores the other workers use."""
    return loaded.torch_threads or 1


def free_data_folder(folder: Path) -> None:
    """One line, before any server starts, when another server holds the embedded Redis's
    folder (the app itself would refuse it too, with a traceback in uvicorn's log)."""
    try:
        check_data_folder(folder)
    except DataFolderInUse as exc:
        raise CliError(str(exc)) from None


def exit_cleanly_on_sigterm() -> None:
    """SIGTERM ends ``serve`` with status 0. uvicorn handles the signal itself while it runs (a
    graceful shutdown), then restores the handler it found and raises the signal again: with
    the default handler the process would die of it (status -15, as if killed) after a clean
    shutdown. This handler exits 0 instead, and before uvicorn runs it exits at once."""

    def exit_zero(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, exit_zero)


def serve(args: argparse.Namespace) -> None:
    from modelcompare.service.api.main import create_app
    from modelcompare.service.api.shutdown import serve as serve_app

    exit_cleanly_on_sigterm()
    loaded = settings(args)
    if loaded.redis_url is None:
        free_data_folder(loaded.data_dir)
    serve_app(create_app(loaded), loaded, args.log_level)


def worker(args: argparse.Namespace) -> None:
    import redis
    import torch
    from prometheus_client import start_http_server

    from modelcompare.service.metrics import Metrics
    from modelcompare.service.store.connection import Connection
    from modelcompare.service.worker_process import WorkerProcess

    loaded = settings(args)
    torch.set_num_threads(worker_threads(loaded))
    if loaded.redis_url is None:
        raise CliError("modelcompare worker needs a Redis server: --redis-url or REDIS_URL")
    metrics = Metrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    connection = None
    while connection is None and not stop.is_set():  # a worker may start before Redis
        try:
            connection = Connection.detect(loaded.redis_url,
                                           socket_timeout=loaded.redis_socket_timeout)
        except redis.ConnectionError as exc:
            logging.getLogger("modelcompare.worker").warning("waiting for Redis: %s", exc)
            stop.wait(loaded.poll_interval)
    if connection is not None:
        WorkerProcess(connection.sync_client(), loaded, metrics=metrics).run(stop)


def demo(args: argparse.Namespace) -> None:
    from modelcompare.service.demo import run_demo

    settings(args)  # MODELCOMPARE_TORCH_THREADS
    if args.data_dir is not None:
        free_data_folder(Path(args.data_dir))
    run_demo(rows=args.rows, chunk=args.chunk, particles=args.particles, seed=args.seed,
             data_dir=args.data_dir)
