"""``modelcompare serve | worker | demo | create | ingest | watch``.

``create``, ``ingest`` and ``watch`` talk to a running server through ``service.client``
(``--url``/``MODELCOMPARE_URL``, ``--api-key``/``MODELCOMPARE_API_KEY``); their errors are one
readable line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.client import API_KEY_ENV, URL_ENV, ModelCompareError, ServerUnreachable
from service.core.config import Settings


class CliError(Exception):
    """A problem the user can fix, reported as one line."""


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("host", "port", "redis_url", "data_dir") and v is not None}
    settings = Settings(**overrides)
    if settings.torch_threads is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
    return settings


def serve(args: argparse.Namespace) -> None:
    from service.api.main import create_app
    from service.api.shutdown import serve as serve_app

    settings = _settings(args)
    serve_app(create_app(settings), settings.host, settings.port, args.log_level)


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

    _settings(args)  # MODELCOMPARE_TORCH_THREADS
    run_demo(rows=args.rows, chunk=args.chunk, particles=args.particles, seed=args.seed,
             data_dir=args.data_dir)


def create(args: argparse.Namespace) -> None:
    """POST the spec; the new id alone on stdout (``ID=$(modelcompare create spec.yaml)``)."""
    import yaml
    from rich.console import Console

    from service.client import Client

    path = _existing(args.spec)
    try:
        spec = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(
            path.read_text())
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(f"{path} is not valid {path.suffix.lstrip('.').upper()}: {exc}") from None
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold one mapping (name, models, estimator, seed)")
    with Client(args.url, args.api_key) as api:
        created = api.create_comparison(spec)
    names = ", ".join(m["name"] for m in created["models"])
    Console(stderr=True).print(f"created comparison [bold]{created['name']}[/bold] with "
                               f"{len(created['models'])} models ({names})")
    print(created["id"])


def ingest(args: argparse.Namespace) -> None:
    """Send a file's rows in chunks (progress bar), then wait until the server applied them.
    Each chunk's Idempotency-Key is derived from the file's bytes, so a rerun sends nothing
    twice."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from service.client import Client

    if args.chunk_size < 1:
        raise CliError("--chunk-size must be at least 1")
    path = _existing(args.file)
    x_cols = [c for item in args.x_cols or [] for c in item.split(",") if c]
    if not x_cols and args.y_col is None:
        raise CliError("name the columns to send: --x-cols and/or --y-col")
    x, y = read_columns(path, x_cols, args.y_col)
    rows = len(x) if x is not None else len(y)  # type: ignore[arg-type]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    console = Console(stderr=True)
    with Client(args.url, args.api_key) as api:
        api.get_comparison(args.comparison)  # an unknown id fails before anything is sent
        columns = (TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("rows"))
        sequences, duplicates = [], 0
        with Progress(*columns, console=console) as progress:
            sent = progress.add_task("sent", total=rows)
            for start in range(0, rows, args.chunk_size):
                stop = min(start + args.chunk_size, rows)
                reply = api.ingest(args.comparison, None if x is None else x[start:stop],
                                   None if y is None else y[start:stop],
                                   idempotency_key=f"file-{digest}-{start}-{stop}")
                sequences.append(reply["sequence"])
                duplicates += reply["duplicate"]
                progress.advance(sent, stop - start)
            evidence = _wait_applied(api, args.comparison, sequences, progress) if args.wait \
                else api.evidence(args.comparison)
        note = f" ({duplicates} were already ingested: skipped)" if duplicates else ""
        console.print(f"sent {rows} rows of {path.name} in {len(sequences)} chunks{note}")
        console.print(evidence_table(evidence))
        if evidence.get("status") == "degraded":
            raise CliError(f"the comparison is degraded: {evidence.get('status_reason')}")


def _wait_applied(api: Any, cid: str, sequences: list[int], progress: Any) -> dict[str, Any]:
    applied = progress.add_task("applied", total=len(sequences))
    while True:
        evidence = api.evidence(cid)
        progress.update(applied, completed=sum(s <= evidence["sequence"] for s in sequences))
        if evidence["sequence"] >= max(sequences) or evidence.get("status") == "degraded":
            return evidence
        time.sleep(0.2)


def read_columns(path: Path, x_cols: list[str],
                 y_col: str | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The named columns of a CSV or Parquet file as float64 arrays (x: rows × columns)."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    try:
        if path.suffix.lower() == ".csv":
            table = pyarrow.csv.read_csv(path)
        elif path.suffix.lower() in (".parquet", ".pq"):
            table = pyarrow.parquet.read_table(path)
        else:
            raise CliError(f"{path}: expected a .csv or .parquet file")
    except (pa.ArrowException, OSError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    wanted = [*x_cols, *([] if y_col is None else [y_col])]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise CliError(f"{path.name} has no column {', '.join(map(repr, missing))}; its columns "
                       f"are: {', '.join(table.column_names)}")
    values = {c: _numeric(table, c, path) for c in wanted}
    x = np.column_stack([values[c] for c in x_cols]) if x_cols else None
    return x, None if y_col is None else values[y_col]


def _numeric(table: Any, column: str, path: Path) -> np.ndarray:
    try:
        values = np.asarray(table[column].to_numpy(), dtype=np.float64)
    except (TypeError, ValueError):
        raise CliError(f"column {column!r} of {path.name} is not numeric") from None
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise CliError(f"column {column!r} of {path.name} has {bad.size} missing or non-finite "
                       f"values (first at data row {bad[0] + 1})")
    return values


def watch(args: argparse.Namespace) -> None:
    """A live table fed by the websocket; ``--count N`` stops after N messages."""
    from rich.console import Console
    from rich.live import Live

    from service.client import AsyncClient

    async def run() -> None:
        async with AsyncClient(args.url, args.api_key) as api:
            with Live(console=Console(), auto_refresh=False) as live:
                seen = 0
                async for message in api.updates(args.comparison):
                    if message["type"] == "deleted":
                        raise CliError(f"comparison {args.comparison} was deleted")
                    live.update(evidence_table(message["evidence"]), refresh=True)
                    seen += 1
                    if seen == args.count:
                        return

    asyncio.run(run())


def evidence_table(evidence: dict[str, Any]) -> Any:
    from rich.table import Table

    status = evidence.get("status") or "ok"
    table = Table(title=f"{evidence['n_observations']} rows, {evidence['sequence']} chunks, "
                  f"version {evidence['version']}, status {status}",
                  caption=evidence.get("status_reason"))
    for column in ("model", "log Z", "± stderr", "log Z / n", "P(model | data)", "rows", "ESS",
                   "state"):
        table.add_column(column, justify="left" if column in ("model", "state") else "right")
    probabilities = [m["posterior_probability"] or 0.0 for m in evidence["models"]]
    for m, probability in zip(evidence["models"], probabilities, strict=True):
        n = m["n_observations"]
        state = ("failed" if m.get("failed") else f"catching up ({n}/{evidence['n_observations']})"
                 if m.get("catching_up") else "current")
        table.add_row(m["name"], _fixed(m["log_evidence"], 2), _fixed(m["log_evidence_stderr"], 2),
                      _fixed(m["log_evidence"] / n if n and m["log_evidence"] is not None
                             else None, 4),
                      _fixed(m["posterior_probability"], 4), str(n), _fixed(m["ess"], 1), state,
                      style="bold green" if probability == max(probabilities) > 0 else "")
    return table


def _fixed(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _existing(name: str) -> Path:
    path = Path(name)
    if not path.is_file():
        raise CliError(f"no such file: {name}")
    return path


def _connection() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", help=f"the server (env {URL_ENV}; default http://127.0.0.1:8000)")
    parent.add_argument("--api-key", help=f"bearer key, when the server needs one (env "
                        f"{API_KEY_ENV})")
    return parent


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="modelcompare", description="Streaming online Bayesian model comparison."
    )
    root.add_argument("--log-level", default="info")
    commands = root.add_subparsers(dest="command", required=True)
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
    connection = _connection()
    p_create = commands.add_parser("create", parents=[connection],
                                   help="create a comparison from a YAML/JSON spec; prints its id")
    p_create.add_argument("spec", help="spec.yaml or spec.json: name, models, estimator, seed")
    p_create.set_defaults(run=create)
    p_ingest = commands.add_parser("ingest", parents=[connection],
                                   help="send a CSV or Parquet file's rows in chunks")
    p_ingest.add_argument("file", help="a .csv (header row) or .parquet file")
    p_ingest.add_argument("--comparison", required=True, help="the comparison's id")
    p_ingest.add_argument("--x-cols", nargs="+", metavar="COL",
                          help="input columns, in the order the models read them")
    p_ingest.add_argument("--y-col", metavar="COL", help="the target column")
    p_ingest.add_argument("--chunk-size", type=int, default=500, help="rows per POST")
    p_ingest.add_argument("--no-wait", dest="wait", action="store_false",
                          help="return once sent, without waiting for the worker")
    p_ingest.set_defaults(run=ingest)
    p_watch = commands.add_parser("watch", parents=[connection],
                                  help="a live table of a comparison's evidence")
    p_watch.add_argument("comparison", help="the comparison's id")
    p_watch.add_argument("--count", type=int, default=0,
                         help="stop after this many updates (the first is the snapshot)")
    p_watch.set_defaults(run=watch)
    return root


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        args.run(args)
    except ServerUnreachable as exc:
        _fail(f"{exc.message}. Is `modelcompare serve` running there? Set --url or {URL_ENV}.")
    except ModelCompareError as exc:
        hint = f" (use --api-key or {API_KEY_ENV})" if exc.status == 401 else ""
        _fail(f"the server refused: {exc}{hint}")
    except CliError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)


def _fail(message: str) -> None:
    print(f"modelcompare: error: {message}", file=sys.stderr)
    sys.exit(1)
