"""The settings reference, generated from the settings records.

``render()`` is docs/reference/settings.md (every estimator setting, from
``modelcompare.estimators.METHODS[method].settings``) and ``render_service()`` is
docs/reference/service-settings.md (every ``MODELCOMPARE_*`` setting, from
``modelcompare.service.core.config.Settings``). Defaults, bounds, the methods and the tiers
(everyday, or advanced: ``modelcompare.estimators.settings.is_advanced``) come from the records,
the values the API refuses from ``modelcompare.service.schemas.REFUSED``; the one-line meanings
from the estimator records' field descriptions and, for the service, from ``SERVICE_MEANINGS``
below. tests/test_docs.py holds the committed files to these functions.

    python docs/settings_reference.py     # rewrite both files
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from pathlib import Path

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from modelcompare.estimators import METHODS
from modelcompare.estimators.settings import is_advanced
from modelcompare.service.core.config import Settings
from modelcompare.service.schemas import REFUSED

ROOT = Path(__file__).resolve().parent.parent
ESTIMATOR_PAGE = ROOT / "docs" / "reference" / "settings.md"
SERVICE_PAGE = ROOT / "docs" / "reference" / "service-settings.md"

# The order methods are named in a row: the streaming methods, then the full-data references.
METHOD_ORDER = ("sgais", "sequential", "minibatch_mh", "hybrid", "ais", "nested", "exact")

# The advanced settings by topic: (heading, introduction, setting names). The everyday settings
# (those without the records' advanced mark) come first, in one table. An advanced setting not
# named here lands in "Other advanced settings", so a new setting is documented the moment it
# exists; a name may sit in one group only.
ESTIMATOR_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Exact HMC moves",
     "While the past is small (n ≤ `full_batch_rows`), and in the `ais` reference, particles move "
     "by exact, Metropolis-corrected HMC on the full data.",
     ("hmc_step", "leapfrog_steps", "hmc_moves")),
    ("SGHMC moves",
     "Past the exact phase the moves are SGHMC on minibatches of the past and of the piece being "
     "annealed in (random-walk Metropolis for `minibatch_mh`).",
     ("steps", "lr", "friction", "preconditioner", "mass_clouds", "noise_friction",
      "noise_estimate_variance", "mh_correction",
      "piece_batch_size", "gradient_dtype", "control_variates", "anchor_growth", "anchor_drift")),
    ("Annealing",
     "How a piece is annealed in.",
     ("ess_target", "resample_threshold", "resampling", "max_annealing_steps", "max_steps")),
    ("Careful ladder",
     "The steps of a long piece (a change point in the data), past the exact phase: a higher "
     "ESS target, longer moves and more particles ([design note](../design/careful-ladder.md)).",
     ("careful_steps", "careful_ess_target", "careful_move_steps", "careful_particles")),
    ("Surprise moves",
     "More moves after a piece that was hard to anneal "
     "([design note](../design/surprise-moves.md)).",
     ("surprise_steps", "surprise_ess", "surprise_moves")),
    ("The log evidence and its standard error", "",
     ("increment_control", "standard_error")),
    ("Re-estimates over the shuffled rows",
     "When the particle system breaks, log Z is estimated again over the rows seen in a random "
     "order (the everyday `reestimate_growth` turns this on and off; "
     "[design note](../design/re-estimates.md)).",
     ("reestimate_min_rows", "reestimate_max_rows")),
    ("Nested sampling",
     "The `nested` reference, and the nested-sampling start of `hybrid`.",
     ("nested_parallel", "parallel", "stop_fraction", "trajectories", "max_iterations")),
)


def method_order() -> list[str]:
    return [m for m in METHOD_ORDER if m in METHODS] + [m for m in METHODS if m not in
                                                         METHOD_ORDER]


def number(value: float, integer: bool) -> str:
    return f"{value:_}" if integer else f"{value:g}"


def choice(value: object, refused: object) -> str:
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    return f"`{shown}`" + (" (library only)" if value == refused else "")


def setting_range(field: FieldInfo, refused: object = None) -> str:
    """A setting's range: [low, high] (a bracket open where the bound is strict), its choices, or
    its booleans; ``refused``, a value the API refuses, is marked library only."""
    if field.annotation is bool:
        return ", ".join(choice(value, refused) for value in (True, False))
    if typing.get_origin(field.annotation) is typing.Literal:
        return ", ".join(choice(value, refused) for value in typing.get_args(field.annotation))
    if field.annotation is str:
        return "`cpu`, `cuda[:k]`"
    integer = field.annotation is int
    low = high = ""
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Gt):
            low = "(" + number(bound.gt, integer)
        elif isinstance(bound, annotated_types.Ge):
            low = "[" + number(bound.ge, integer)
        if isinstance(bound, annotated_types.Lt):
            high = number(bound.lt, integer) + ")"
        elif isinstance(bound, annotated_types.Le):
            high = number(bound.le, integer) + "]"
    return f"{low}, {high}"


Row = tuple[str, str, str, str]  # name, default, range, meaning


def estimator_rows(advanced: bool) -> dict[Row, list[str]]:
    """Each distinct (setting, default, range, meaning) of one tier with the methods that share
    it."""
    rows: dict[Row, list[str]] = {}
    for method in method_order():
        record: type[BaseModel] = METHODS[method].settings
        for name, field in record.model_fields.items():
            if is_advanced(field) != advanced:
                continue
            refused = REFUSED[name].value if name in REFUSED else None
            key = (name, repr(field.default), setting_range(field, refused),
                   field.description or "")
            rows.setdefault(key, []).append(method)
    return rows


def table(rows: Iterable[tuple[Row, list[str]]]) -> list[str]:
    lines = ["| setting | default | range | methods | meaning |",
             "| --- | --- | --- | --- | --- |"]
    for (name, default, bounds, meaning), methods in rows:
        meaning = meaning.replace("|", r"\|")  # a bar would end the cell
        lines.append(f"| `{name}` | `{default}` | {bounds} | {', '.join(methods)} | {meaning} |")
    return lines


def render() -> str:
    """docs/reference/settings.md."""
    rows = estimator_rows(advanced=True)
    placed = [name for _, _, names in ESTIMATOR_GROUPS for name in names]
    assert len(placed) == len(set(placed)), "a setting is in two groups"
    groups = [*ESTIMATOR_GROUPS,
              ("Other advanced settings", "",
               tuple(sorted({row[0] for row in rows} - set(placed))))]
    lines = [
        "# Estimator settings",
        "",
        "<!-- Generated by docs/settings_reference.py from the settings records: edit the "
        "records (or the grouping in that file) and run `python docs/settings_reference.py`. -->",
        "",
        "Each method has its own settings record "
        "(`modelcompare.estimators.METHODS[method].settings`, e.g. "
        "`SGAISSettings`). The same record checks `OnlineEvidence(model, method, **settings)`, "
        "`modelcompare.estimators.build(model, method, **settings)` and the service's "
        '`"estimator": {"method": …, …}`; the service\'s OpenAPI page (`/docs`) lists the same '
        "defaults and bounds. An unknown setting, a value out of range or of the wrong type "
        "(`64.0` particles, `1` for `true`) raises `EstimatorConfigError` (HTTP 422) naming the "
        "setting, or the known ones. `exact` takes only `device`.",
        "",
        "A row holds one setting for the methods it names; a setting whose default, range or "
        "meaning differs between methods has one row per variant. Ranges are [low, high], with "
        "a round bracket where the bound itself is excluded. What the methods are, and when to "
        "change a setting: [Estimators and accuracy](../guide/estimators.md).",
        "",
        "The upper bounds keep one update of one chunk from holding a worker for long: each caps "
        "a setting that multiplies an update's cost at 4–16× its default. Several settings at "
        "their caps multiply; the service's per-update compute budget (`UPDATE_BUDGET`, "
        "[limits](../guide/limits.md)) bounds that.",
        "",
        "## Everyday settings",
        "",
        "The settings worth knowing on day one; the OpenAPI document lists them first.",
        "",
        *table(estimator_rows(advanced=False).items()),
        "",
        "## Advanced settings",
        "",
        "Best left at their defaults unless a measurement says otherwise: the records mark them "
        'advanced, and the OpenAPI document marks them `"x-advanced": true` after the everyday '
        "ones. A value marked *library only* is taken by the library and the benchmarks; the "
        "service refuses it (HTTP 422 with the reason), the project's measurements showing it "
        "worse for users: [what the service does not offer]"
        "(../guide/estimators.md#what-the-service-does-not-offer).",
    ]
    for heading, intro, names in groups:
        chosen = [(row, methods) for name in names for row, methods in rows.items()
                  if row[0] == name]
        if not chosen:
            continue
        lines += ["", f"### {heading}", ""]
        if intro:
            lines += [intro, ""]
        lines += table(chosen)
    return "\n".join(lines) + "\n"


# Service settings: MODELCOMPARE_<NAME> in the environment. One line per field of
# modelcompare.service.core.config.Settings; render_service() fails on a field without one.
SERVICE_GROUPS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("Server", "", {
        "redis_url": "the Redis server (`redis://host:port/db`, a node of a Redis Cluster "
                     "included); unset: `serve` starts a private, embedded Redis",
        "data_dir": "folder of the embedded Redis' data file (one server per folder)",
        "host": "interface `serve` listens on",
        "port": "TCP port `serve` listens on",
        "embedded_worker": "run a worker inside `serve`; unset: exactly when Redis is embedded",
        "key_prefix": "prefix of every Redis key the service writes",
        "torch_threads": "torch intra-op threads; unset: torch's default, except "
                         "`modelcompare worker`, which uses 1",
        "wait_timeout": "seconds a `?wait=true` chunk waits to be applied before it answers 202 "
                        "with `\"processed\": false`",
        "shutdown_timeout": "seconds `serve` gives running requests and its worker after "
                            "SIGTERM before it cancels them",
        "idempotency_ttl": "seconds an `Idempotency-Key` is remembered; a chunk re-sent after "
                           "that is applied again",
    }),
    ("Limits", "What one request or one comparison may ask for: "
     "[Limits](../guide/limits.md) explains each.", {
        "max_models": "models per comparison",
        "max_comparison_parameters": "parameters summed over a comparison's models",
        "max_state_bytes": "the models' stored state, summed over a comparison",
        "max_x_dim": "numbers per row of `x`; every index in `columns` is below it",
        "max_rows": "rows per chunk (413)",
        "max_comparison_bytes": "bytes of chunks one comparison holds (its stored history)",
        "max_body_bytes": "request body (413)",
        "history_cache_bytes": "bytes of stored histories a worker keeps in memory (the "
                               "columns some model reads); the least recently used go first",
        "max_inflight_bytes": "memory one API process sets aside for the bodies it reads and "
                              "parses at once: a chunk counts 6× its body, any other body 30×; "
                              "past it 503 with `Retry-After`",
        "max_query_rows": "rows of `x` per `predict` or `expectation` request",
        "max_query_body_bytes": "body of `predict` and `expectation` (413)",
        "max_header_bytes": "request line and headers (400 past it)",
        "request_read_timeout": "seconds a request's line, headers and body may take to arrive",
        "keep_alive_timeout": "seconds before an idle keep-alive connection is closed",
        "max_connections": "open connections, websockets included (one idle for a second makes "
                           "room, a silent one first; 503 when none is idle)",
        "max_websockets": "open websockets per API process; past it a new one is closed with "
                          "1013 and the reason",
        "redis_pool_size": "the API's Redis connections",
        "redis_pool_timeout": "seconds a request waits for a Redis connection (then 503)",
        "redis_socket_timeout": "seconds any process waits to connect to Redis or for one "
                                "reply; past it the connection counts as lost (the worker "
                                "retries, the API answers 503)",
        "update_budget": "CPU seconds of one chunk's update, counted on the worker thread "
                         "that runs it (a busy host does not use it up); past it the chunk "
                         "fails like a poison chunk",
    }),
    ("Workers", "[Deployment and scaling](../guide/deployment.md#workers) explains each.", {
        "lease_ttl": "seconds a worker's lease on a comparison lasts after its last renewal",
        "poll_interval": "seconds between a worker's rechecks of the comparisons it knows have "
                         "work (held by another worker, backing off), its longest sleep on "
                         "the work channel, and the first back-off after a failed step",
        "work_sweep_interval": "seconds between a worker's safety sweeps over every "
                               "comparison's progress, for wake-up messages it missed",
        "failure_backoff_max": "longest back-off (seconds) of a comparison whose steps keep "
                               "failing",
        "batch_chunks": "chunks a worker applies per comparison per turn",
        "parallel_models": "workers share out the models of a chunk; false: the lease holder "
                           "computes every model",
        "history_cache": "comparisons whose stored history a worker keeps in memory",
        "worker_lanes": "threads per worker process, each serving comparisons on its own; "
                        "with two or more, lane 0 is the express lane",
        "express_lane_seconds": "CPU seconds of a comparison's last chunk update at most for "
                                "the express lane to serve it; an update past it there is "
                                "abandoned (no attempt lost) and left to the other lanes",
        "housekeeping_interval": "seconds between a worker's removals of dead consumers",
        "consumer_idle_max": "seconds of idleness after which a consumer that owns no pending "
                             "entry is removed",
    }),
    ("Evidence", "", {
        "evidence_window_rows": "rows W of the [windowed evidence](../guide/api.md#windowed-"
                                "evidence)",
        "diverged_warning_fraction": "fraction of an update's SGHMC trajectories undone as "
                                     "diverged past which a model is marked unreliable for good",
    }),
    ("Decisions", "[Decisions](../guide/decisions.md) explains each.", {
        "max_rules": "decision rules per comparison",
        "max_rule_window_rows": "rows of a windowed Bayes-factor rule",
        "events_kept": "decision events kept per comparison; past it the oldest go",
        "metrics_max_comparisons": "comparisons whose per-model and per-rule figures `/metrics` "
                                   "exports, the newest, and whose queue depths it exports, the "
                                   "deepest (0: none)",
    }),
    ("Webhooks", "[Decisions](../guide/decisions.md#webhooks) explains each; "
     "[the design note](../design/webhooks.md) the rules behind them.", {
        "webhook_allow_public": "whether webhooks may go to public (globally routable) addresses",
        "webhook_allowed_networks": "networks (CIDR, a JSON list) webhooks may go to besides "
                                    "public addresses: private, loopback, link-local and metadata "
                                    "addresses are refused unless listed, e.g. "
                                    "`[\"10.1.2.0/24\"]`",
        "webhook_timeout": "seconds each step of a try may take (resolve, connect, send, read "
                           "the answer)",
        "webhook_max_response_bytes": "bytes of a receiver's answer read, at most",
        "webhook_max_attempts": "tries of a delivery before it is dead (listed and replayable)",
        "webhook_backoff": "seconds before the second try; doubled after each failure",
        "webhook_backoff_max": "seconds between tries, at most",
        "webhook_outbox_max": "deliveries waiting per comparison; past it a new one is dead at "
                              "once",
        "dead_deliveries_kept": "dead deliveries kept per comparison; past it the oldest go",
        "webhook_concurrency": "deliveries a worker process makes at once (0: it makes none)",
    }),
    ("Failed updates", "[Reliability](../guide/reliability.md#poison-chunks) explains each.", {
        "poison_max_attempts": "attempts at a chunk whose update fails before it is "
                               "dead-lettered",
        "poison_scope": "`model`: a failure in some models' own updates fails those models and "
                        "the chunk goes on to the rest; `chunk`: every failure is the chunk's",
        "poison_policy": "after a dead letter: `halt` stops on that chunk until "
                         "`POST …/resume`; `skip` leaves it out and goes on",
    }),
    ("Security", "[Security](../guide/security.md) explains each.", {
        "api_keys": "JSON map of API keys (or `sha256:<hex>` digests) to their read and write "
                    "scopes; empty: no keys needed",
        "cors_origins": "JSON list of origins allowed by CORS; empty: CORS off",
    }),
)

MIB, KIB = 1024 * 1024, 1024
SECONDS = ("_timeout", "_ttl", "_interval", "_budget", "_max")  # float settings in seconds


def service_default(name: str) -> str:
    """A service setting's default as the docs write it: sizes in KiB / MiB, seconds with s,
    counts with thousands separators."""
    field = Settings.model_fields[name]
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return f"`{value!r}`".replace("'", '"')
    if isinstance(value, int) and name.endswith("_bytes"):
        return f"{value // MIB} MiB" if value % MIB == 0 else f"{value // KIB} KiB"
    if isinstance(value, float) and name.endswith(SECONDS):
        return f"{int(value):,} s" if value >= 1000 else f"{value:g} s"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}" if name != "port" else str(value)
    return f"`{value}`"


def environment_names(name: str) -> str:
    names = [f"`MODELCOMPARE_{name.upper()}`"]
    if name == "redis_url":
        names.append("`REDIS_URL`")
    return ", ".join(names)


def service_bounds(name: str) -> str:
    field = Settings.model_fields[name]
    if typing.get_origin(field.annotation) is typing.Literal:
        return ", ".join(f"`{choice}`" for choice in typing.get_args(field.annotation))
    parts = []
    for bound in field.metadata:
        for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(value := getattr(bound, attribute, None), int | float):
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else
                             f"{sign} {value:g}")
    return ", ".join(parts) or "—"


def render_service() -> str:
    """docs/reference/service-settings.md."""
    documented = [name for _, _, meanings in SERVICE_GROUPS for name in meanings]
    missing = set(Settings.model_fields) - set(documented)
    assert not missing, f"give these service settings a meaning in SERVICE_GROUPS: {missing}"
    assert len(documented) == len(set(documented)), "a service setting is in two groups"
    unknown = set(documented) - set(Settings.model_fields)
    assert not unknown, f"SERVICE_GROUPS names settings that do not exist: {unknown}"
    lines = [
        "# Service settings",
        "",
        "<!-- Generated by docs/settings_reference.py from service/core/config.py: edit the "
        "record (and its meaning in that file) and run `python docs/settings_reference.py`. -->",
        "",
        "The API server and the workers read their settings from the environment, each as "
        "`MODELCOMPARE_<NAME>` (`service/core/config.py`); `REDIS_URL` is accepted too. Lists "
        "and maps are JSON (`MODELCOMPARE_CORS_ORIGINS='[\"https://app.example\"]'`). A value "
        "out of bounds stops the process at start with the setting named.",
    ]
    for heading, intro, meanings in SERVICE_GROUPS:
        lines += ["", f"## {heading}", ""]
        if intro:
            lines += [intro, ""]
        lines += ["| environment | default | bounds | meaning |", "| --- | --- | --- | --- |"]
        lines += [f"| {environment_names(name)} | {service_default(name)} | "
                  f"{service_bounds(name)} | {meaning} |" for name, meaning in meanings.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ESTIMATOR_PAGE.write_text(render())
    SERVICE_PAGE.write_text(render_service())
    print(f"wrote {ESTIMATOR_PAGE.relative_to(ROOT)} and {SERVICE_PAGE.relative_to(ROOT)}")
