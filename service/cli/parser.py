"""The ``modelcompare`` command line's declarations: commands, options and help texts.

Building the parser imports nothing of the service (``--help`` and ``--version`` answer without
torch, numpy, httpx, redis or pydantic): each command names its implementation as
``"module:function"`` in this package (``run``), which ``main`` imports once the command line is
parsed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from importlib.metadata import version
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LIST_PAGE = 100  # comparisons `modelcompare list` asks for per request


class LateHelp(str):
    """A help text whose ``{fields}`` come from a module too slow to import for every command
    line (pydantic-settings, the HTTP client: ~0.1 s each); they are looked up only when the help
    is printed."""

    fields: Callable[[], Mapping[str, object]]

    def __new__(cls, text: str, fields: Callable[[], Mapping[str, object]]) -> LateHelp:
        help_ = super().__new__(cls, text)
        help_.fields = fields
        return help_


class _LateHelpFormatter(argparse.HelpFormatter):
    # the hook argparse's own ArgumentDefaultsHelpFormatter overrides
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        return text.format_map(text.fields()) if isinstance(text, LateHelp) else text


class _Parser(argparse.ArgumentParser):
    """The root parser, and so (``add_subparsers``' default class) every command's."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(formatter_class=_LateHelpFormatter, **kwargs)


def _settings_defaults() -> dict[str, object]:
    from modelcompare.service.core.config import Settings

    return {name: field.default for name, field in Settings.model_fields.items()}


def _client_names() -> dict[str, object]:
    from modelcompare.service import client

    return vars(client)


def _setting(name: str, text: str) -> LateHelp:
    """Help for an option that overrides a setting: its variable and its default."""
    return LateHelp(f"{text} (env MODELCOMPARE_{name.upper()}; default {{{name}}})",
                    _settings_defaults)


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
    parent.add_argument("--url", help=LateHelp("the server (env {URL_ENV}; default "
                                               "{DEFAULT_URL})", _client_names))
    parent.add_argument("--api-key", help=LateHelp("bearer key, when the server needs one (env "
                                                   "{API_KEY_ENV})", _client_names))
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
    serve.set_defaults(run="server:serve")
    worker = commands_.add_parser(
        "worker", parents=[common],
        help="a stream worker on a shared Redis (run as many as you like)",
        description="Apply queued chunks of every comparison on the Redis server; workers "
        "share the comparisons. Stops on SIGTERM or Ctrl-C.")
    worker.add_argument("--redis-url", help="the Redis server (env REDIS_URL; required)")
    worker.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics on this port (default 0: none)")
    worker.set_defaults(run="server:worker")
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
    demo.set_defaults(run="server:demo")


def _client_commands(commands_: Any) -> None:
    connection = _connection()
    create = commands_.add_parser("create", parents=[connection],
                                  help="create a comparison from a YAML/JSON spec; prints its id")
    create.add_argument("spec", help="spec.yaml or spec.json: the POST /v1/comparisons body")
    create.set_defaults(run="commands:create")
    add = commands_.add_parser(
        "add-model", parents=[connection], help="add a model to a comparison from a YAML/JSON spec",
        description="The model replays the rows already stored (catching up) before it joins "
        "the probabilities; it must accept every one of them.")
    add.add_argument("comparison", help="the comparison's id")
    add.add_argument("spec", help="model.yaml or model.json: the POST …/models body (name, "
                     "family, config, columns or formula, prior_probability)")
    add.set_defaults(run="commands:add_model")
    remove = commands_.add_parser(
        "remove-model", parents=[connection], help="remove a model from a comparison",
        description="The other models' states are untouched; their probabilities renormalise.")
    remove.add_argument("comparison", help="the comparison's id")
    remove.add_argument("model", help="the model's name")
    remove.set_defaults(run="commands:remove_model")
    ingest = commands_.add_parser(
        "ingest", parents=[connection],
        help="send a CSV or Parquet file's rows in chunks",
        description="Check the whole file against the comparison (columns, values, labels, "
        "every model's support), then send it in chunks. A comparison by formula names the "
        "columns it reads (sent as Arrow IPC); any other reads --x-cols and --y-col. Re-running "
        "it sends nothing twice, whatever --chunk-size: each chunk's key hashes the rows up to "
        "it.")
    ingest.add_argument("file", help="a .csv (header row) or .parquet file")
    ingest.add_argument("--comparison", required=True, help="the comparison's id")
    ingest.add_argument("--x-cols", nargs="+", metavar="COL",
                        help="input columns, in the order the models read them (not for a "
                        "comparison by formula)")
    ingest.add_argument("--y-col", metavar="COL", help="the target column (not for a "
                        "comparison by formula)")
    ingest.add_argument("--labels", nargs="+", metavar="LABEL",
                        help="class labels of the target in class order (default: text "
                        "labels sorted)")
    ingest.add_argument("--chunk-size", type=int, default=500,
                        help="rows per POST (default %(default)s)")
    ingest.add_argument("--key-salt", default="", help="make the chunk keys differ from "
                        "those of another file that begins with the same rows")
    ingest.add_argument("--no-wait", dest="wait", action="store_false",
                        help="return once sent, without waiting for the worker")
    ingest.set_defaults(run="ingest:ingest")
    watch = commands_.add_parser("watch", parents=[connection],
                                 help="a live table of a comparison's evidence and its "
                                 "decision events")
    watch.add_argument("comparison", help="the comparison's id")
    watch.add_argument("--count", type=int, default=0,
                       help="stop after this many updates, the first being the snapshot "
                       "(default 0: until Ctrl-C)")
    watch.add_argument("--until", metavar="RULE", default=None,
                       help="exit 0 once the decision rule RULE fires (at once when it is "
                       "firing); --count is then ignored")
    watch.set_defaults(run="watch:watch")
    listing = commands_.add_parser("list", parents=[connection],
                                   help="the comparisons, newest first")
    listing.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                         help="show the newest N only (default: all of them, fetched "
                         f"{LIST_PAGE} a request)")
    listing.set_defaults(run="commands:list_comparisons")
    families = commands_.add_parser(
        "families", parents=[connection], help="the model families the server can build",
        description="One line per family: its name, the package that provides it and its "
        "version, and what it is (GET /v1/families); then plugins that failed to load there.")
    families.set_defaults(run="commands:families")
    delete = commands_.add_parser("delete", parents=[connection],
                                  help="delete comparisons with all their data")
    delete.add_argument("comparisons", nargs="+", metavar="ID", help="comparison ids")
    delete.set_defaults(run="commands:delete")
    predict = commands_.add_parser(
        "predict", parents=[connection],
        help="the model-averaged prediction at given inputs, as CSV",
        description="The BMA predictive at rows of inputs (from a file or --x), one CSV line "
        "per row: the mixture's mean and variance (or class probabilities p0, p1, …), then "
        "each model's.")
    predict.add_argument("comparison", help="the comparison's id")
    predict.add_argument("file", nargs="?", help="a .csv or .parquet file of inputs (the "
                         "columns a comparison by formula names)")
    predict.add_argument("--x-cols", nargs="+", metavar="COL", help="the file's input columns "
                         "(not for a comparison by formula)")
    predict.add_argument("--x", action="append", metavar="V,V,…",
                         help="one row of inputs, comma-separated (repeat for more rows)")
    predict.add_argument("--json", action="store_true", help="print the API's reply as JSON")
    predict.set_defaults(run="commands:predict")


def _check_model_command(commands_: Any) -> None:
    check = commands_.add_parser(
        "check-model", parents=[_common()],
        help="check a model class of your own against the model contract",
        description="Build MODULE:CLASS from --config and check it before comparing or "
        "deploying it: construction and config round trip, shapes and dtypes, prior draws "
        "against log_prior, gradients against finite differences, predict, state save and "
        "load, and SG-AIS's log Z against the closed form or a reference. One line per check; "
        "exit status 1 if any failed. MODULE is imported from the current folder or the "
        "Python path. See docs/guide/writing-models.md.")
    check.add_argument("target", metavar="MODULE:CLASS",
                       help="the model class, e.g. modelcompare_example_models:StudentTRegression")
    check.add_argument("--config", default="{}", metavar="JSON",
                       help="the constructor's keyword arguments as a JSON object (default {})")
    check.add_argument("--data", metavar="FILE", help="check on the first 64 rows of this .csv "
                       "or .parquet file instead of rows drawn from the model")
    check.add_argument("--x-cols", nargs="+", default=[], metavar="COL",
                       help="the file's input columns, in the order the model reads them")
    check.add_argument("--y-col", metavar="COL", help="the file's target column")
    check.add_argument("--seed", type=int, default=0,
                       help="seed of every draw the checks make (default 0)")
    check.set_defaults(run="check_model:run")


def build() -> argparse.ArgumentParser:
    root = _Parser(prog="modelcompare", description="Streaming online Bayesian model comparison.")
    root.add_argument("--version", action="version",
                      version=f"%(prog)s {version('modelcompare')}")
    root.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                      help="log messages from this level up")
    commands_ = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _service_commands(commands_)
    _client_commands(commands_)
    _check_model_command(commands_)
    return root
