"""The ``modelcompare`` command line.

``serve``, ``worker`` and ``demo`` run the service; ``create``, ``ingest``, ``watch``, ``list``,
``delete`` and ``predict`` talk to a running server through ``modelcompare.service.client``
(``--url`` / ``MODELCOMPARE_URL``, ``--api-key`` / ``MODELCOMPARE_API_KEY``); ``check-model`` checks
a model class of your own. Every error is one readable line on stderr and exit status 1 (2 for
``check-model``'s bad arguments), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from modelcompare.service.cli import check_model, commands, server
from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.ingest import ingest
from modelcompare.service.client import (
    API_KEY_ENV,
    DEFAULT_URL,
    URL_ENV,
    ModelCompareError,
    ServerUnreachable,
)
from modelcompare.service.core.config import Settings
from modelcompare.service.store.connection import UnsupportedRedis

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _setting(name: str, text: str) -> str:
    """Help for an option that overrides a setting: its variable and its default."""
    default = Settings.model_fields[name].default
    return f"{text} (env MODELCOMPARE_{name.upper()}; default {default})"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="log messages from this level up (default info)")
    return parent


def _connection() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False, parents=[_common()])
    parent.add_argument("--url", help=f"the server (env {URL_ENV}; default {DEFAULT_URL})")
    parent.add_argument("--api-key", help=f"bearer key, when the server needs one (env "
                        f"{API_KEY_ENV})")
    return parent


def _service_commands(commands_: Any) -> None:  # the root parser's subparsers
    common = _common()
    serve = commands_.add_parser(
        "serve", parents=[common],
        help="the HTTP API (with an embedded Redis and worker unless given a Redis URL)",
        description="Run the HTTP API and the dashboard. Without a Redis URL it also starts a "
        "private Redis (its data in --data-dir; one server per folder) and a worker in this "
        "process, so this one command runs everything. Other settings: MODELCOMPARE_* "
        "variables (docs/reference/service-settings.md).")
    serve.add_argument("--host", help=_setting("host", "interface to listen on"))
    serve.add_argument("--port", type=int, help=_setting("port", "TCP port"))
    serve.add_argument("--redis-url", help="use this Redis server (env REDIS_URL); then "
                       "workers run as `modelcompare worker` processes")
    serve.add_argument("--data-dir", help=_setting("data_dir", "folder of the embedded Redis"))
    serve.set_defaults(run=server.serve)
    worker = commands_.add_parser(
        "worker", parents=[common],
        help="a stream worker on a shared Redis (run as many as you like)",
        description="Apply queued chunks of every comparison on the Redis server; workers "
        "share the comparisons. Stops on SIGTERM or Ctrl-C.")
    worker.add_argument("--redis-url", help="the Redis server (env REDIS_URL; required)")
    worker.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics on this port (default 0: none)")
    worker.set_defaults(run=server.worker)
    demo = commands_.add_parser(
        "demo", parents=[common],
        help="four models race on synthetic data, the exact answer beside SG-AIS",
        description="Start a private server, stream synthetic regression data into four "
        "linear regressions (SG-AIS and the exact evidence side by side) and print the "
        "winner.")
    for option, default, text in (("--rows", 3000, "rows to stream"),
                                  ("--chunk", 250, "rows per chunk"),
                                  ("--particles", 64, "SG-AIS particles per model"),
                                  ("--seed", 0, "seed of the data and estimators")):
        demo.add_argument(option, type=int, default=default, help=f"{text} (default {default})")
    demo.add_argument("--data-dir", help="keep the embedded Redis here (default: a temporary "
                      "folder, removed at the end)")
    demo.set_defaults(run=server.demo)


def _client_commands(commands_: Any) -> None:
    connection = _connection()
    create = commands_.add_parser("create", parents=[connection],
                                  help="create a comparison from a YAML/JSON spec; prints its id")
    create.add_argument("spec", help="spec.yaml or spec.json: the POST /v1/comparisons body")
    create.set_defaults(run=commands.create)
    add = commands_.add_parser(
        "add-model", parents=[connection], help="add a model to a comparison from a YAML/JSON spec",
        description="The model replays the rows already stored (catching up) before it joins "
        "the probabilities; it must accept every one of them.")
    add.add_argument("comparison", help="the comparison's id")
    add.add_argument("spec", help="model.yaml or model.json: the POST …/models body (name, "
                     "family, config, columns, prior_probability)")
    add.set_defaults(run=commands.add_model)
    remove = commands_.add_parser(
        "remove-model", parents=[connection], help="remove a model from a comparison",
        description="The other models' states are untouched; their probabilities renormalise.")
    remove.add_argument("comparison", help="the comparison's id")
    remove.add_argument("model", help="the model's name")
    remove.set_defaults(run=commands.remove_model)
    ingest_ = commands_.add_parser(
        "ingest", parents=[connection],
        help="send a CSV or Parquet file's rows in chunks",
        description="Check the whole file against the comparison (columns, values, labels, "
        "every model's support), then send it in chunks. Re-running it sends nothing twice, "
        "whatever --chunk-size: each chunk's key hashes the rows up to it.")
    ingest_.add_argument("file", help="a .csv (header row) or .parquet file")
    ingest_.add_argument("--comparison", required=True, help="the comparison's id")
    ingest_.add_argument("--x-cols", nargs="+", metavar="COL",
                         help="input columns, in the order the models read them")
    ingest_.add_argument("--y-col", metavar="COL", help="the target column")
    ingest_.add_argument("--labels", nargs="+", metavar="LABEL",
                         help="class labels of the target in class order (default: text "
                         "labels sorted)")
    ingest_.add_argument("--chunk-size", type=int, default=500,
                         help="rows per POST (default %(default)s)")
    ingest_.add_argument("--key-salt", default="", help="make the chunk keys differ from "
                         "those of another file that begins with the same rows")
    ingest_.add_argument("--no-wait", dest="wait", action="store_false",
                         help="return once sent, without waiting for the worker")
    ingest_.set_defaults(run=ingest)
    watch = commands_.add_parser("watch", parents=[connection],
                                 help="a live table of a comparison's evidence")
    watch.add_argument("comparison", help="the comparison's id")
    watch.add_argument("--count", type=int, default=0,
                       help="stop after this many updates, the first being the snapshot "
                       "(default 0: until Ctrl-C)")
    watch.set_defaults(run=commands.watch)
    listing = commands_.add_parser("list", parents=[connection],
                                   help="the comparisons, newest first")
    listing.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                         help="show the newest N only (default: all of them, fetched "
                         f"{commands.LIST_PAGE} a request)")
    listing.set_defaults(run=commands.list_comparisons)
    delete = commands_.add_parser("delete", parents=[connection],
                                  help="delete comparisons with all their data")
    delete.add_argument("comparisons", nargs="+", metavar="ID", help="comparison ids")
    delete.set_defaults(run=commands.delete)
    predict = commands_.add_parser(
        "predict", parents=[connection],
        help="the model-averaged prediction at given inputs, as CSV",
        description="The BMA predictive at rows of inputs (from a file or --x), one CSV line "
        "per row: the mixture's mean and variance (or class probabilities p0, p1, …), then "
        "each model's.")
    predict.add_argument("comparison", help="the comparison's id")
    predict.add_argument("file", nargs="?", help="a .csv or .parquet file of inputs")
    predict.add_argument("--x-cols", nargs="+", metavar="COL", help="the file's input columns")
    predict.add_argument("--x", action="append", metavar="V,V,…",
                         help="one row of inputs, comma-separated (repeat for more rows)")
    predict.add_argument("--json", action="store_true", help="print the API's reply as JSON")
    predict.set_defaults(run=commands.predict)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="modelcompare", description="Streaming online Bayesian model comparison.")
    root.add_argument("--version", action="version",
                      version=f"%(prog)s {version('modelcompare')}")
    root.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                      help="log messages from this level up")
    commands_ = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _service_commands(commands_)
    _client_commands(commands_)
    check_model.declare(commands_, [_common()])
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
        verb = "is unavailable" if exc.status == 503 else "refused"
        _fail(f"the server {verb}: {exc}{hint}")
    except (CliError, UnsupportedRedis) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)


def _fail(message: str) -> None:
    print(f"modelcompare: error: {message}", file=sys.stderr)
    sys.exit(1)
