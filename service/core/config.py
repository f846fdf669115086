"""Settings from the environment (``MODELCOMPARE_`` prefix; ``REDIS_URL`` is accepted too)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from modelcompare.service.core.security import KeyScope
from modelcompare.service.limits import Limits
from modelcompare.service.store.connection import BLOCK_MAX, SOCKET_TIMEOUT
from modelcompare.service.webhooks.targets import Allowlist

# What reading and parsing a body holds, as a multiple of its bytes (service/api/inflight.py): a
# chunk parsed with numpy (the body, its character classes, its numbers as float64, the stored
# block), and any other body, parsed by json into Python objects.
CHUNK_BODY_COST = 6
JSON_BODY_COST = 30
EVENTS_KEPT = 1000  # decision events kept per comparison (service/events.py)
WEBHOOK_OUTBOX_MAX = 1000  # webhook deliveries waiting per comparison (service/webhooks)
DEAD_DELIVERIES_KEPT = 1000  # webhook deliveries given up on, kept per comparison


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MODELCOMPARE_", extra="ignore", populate_by_name=True
    )

    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("MODELCOMPARE_REDIS_URL", "REDIS_URL")
    )
    data_dir: Path = Path(".modelcompare")  # embedded Redis keeps its data file here
    key_prefix: str = "mc"
    host: str = "127.0.0.1"
    port: int = 8000
    embedded_worker: bool | None = None  # default: on exactly when Redis is embedded
    max_rows: int = Field(default=100_000, ge=1)
    # Bytes of chunk blocks (rows × (x columns + y) × 8, plus 9 per chunk) one comparison may
    # hold: its stored history, which Redis keeps and a worker loads whole.
    max_comparison_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    # A JSON body takes ~15× its size in memory while parsed: 16 MiB keeps a chunk under 300 MB.
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    # Memory one API process sets aside for the request bodies it reads and parses at once
    # (service/api/inflight.py, InflightLimit): a chunk counts 6× its body (the body, its class
    # map, its numbers as float64 and the stored block), another body 30× (JSON objects); past
    # it 503 with Retry-After. At least one full-size chunk must fit (>= 6 × max_body_bytes);
    # the default holds three 16 MiB chunks.
    max_inflight_bytes: int = Field(default=288 * 1024 * 1024, ge=1024 * 1024)
    wait_timeout: float = Field(default=30.0, gt=0)
    # `modelcompare serve` exits within this many seconds of SIGTERM (service/api/shutdown.py),
    # plus the embedded Redis' own shutdown.
    shutdown_timeout: float = Field(default=5.0, gt=0)
    idempotency_ttl: float = Field(default=24 * 3600.0, gt=0)
    # A worker's hold on one comparison, renewed every lease_ttl / 3 while it serves it: a dead
    # worker's comparison is taken over within lease_ttl + poll_interval + one update.
    lease_ttl: float = Field(default=2.0, gt=0)
    # How often a worker rechecks the comparisons it knows have work (held by another worker,
    # backing off) and how long it sleeps on the work channel when it knows of none.
    poll_interval: float = Field(default=0.5, gt=0)
    # Every work_sweep_interval s a worker reads every comparison's progress (service/store/
    # work.py): the safety net for a wake-up message it missed; it sweeps on (re)connecting too.
    work_sweep_interval: float = Field(default=60.0, gt=0)
    # A comparison whose step fails waits poll_interval, doubling per failure up to this.
    failure_backoff_max: float = Field(default=30.0, gt=0)
    # Every housekeeping_interval s a worker removes consumers idle over consumer_idle_max s
    # that own no pending entry from the consumer groups (service/housekeeping.py).
    housekeeping_interval: float = Field(default=60.0, gt=0)
    consumer_idle_max: float = Field(default=600.0, gt=0)
    # Workers share out a chunk's model updates (service/parallel.py); False: the worker
    # holding a comparison's lease computes every model itself.
    parallel_models: bool = True
    batch_chunks: int = Field(default=16, ge=1)  # chunks a worker applies per lease
    # rows of the windowed evidence log p(last W rows | earlier rows) (service/window.py)
    evidence_window_rows: int = Field(default=5000, ge=1, le=10**9)
    # An update that undoes more than this fraction of its SGHMC trajectories as diverged marks
    # the model's log Z unreliable for good (service/reliability.py).
    diverged_warning_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    history_cache: int = Field(default=16, ge=1)  # comparisons whose history a worker caches
    # Bytes of those histories (only the columns some model reads, float64, with growth room):
    # least recently used ones are dropped past it; the one in use stays even when larger.
    history_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    # intra-op threads; None: torch's default, except `modelcompare worker`, which uses 1
    torch_threads: int | None = Field(default=None, ge=1)
    # What one comparison may ask for (docs/guide/limits.md), checked at create and add-model before
    # anything is allocated; sized so a few large comparisons fit a 2-core, 24 GB host.
    max_models: int = Field(default=50, ge=1)
    max_comparison_parameters: int = Field(default=20_000, ge=1)  # summed over the models
    # Every model's stored state (``modelcompare.service.limits.state_bytes``: about particles ×
    # (parameters + 3) × 8 B, D×D × 8 B for exact): a worker holds them all and rewrites them in
    # Redis on every commit.
    max_state_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    max_x_dim: int = Field(default=10_000, ge=1)  # numbers per row; columns read are below it
    max_query_rows: int = Field(default=10_000, ge=1)  # rows of x per predict or expectation
    max_query_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)  # their body (413)
    # Decision rules (docs/guide/decisions.md): rules per comparison, rows of a rule's window,
    # and events kept per comparison (the oldest go first).
    max_rules: int = Field(default=20, ge=1, le=1000)
    max_rule_window_rows: int = Field(default=10_000_000, ge=1, le=10**9)
    events_kept: int = Field(default=EVENTS_KEPT, ge=1, le=1_000_000)
    # /metrics exports per-model and per-rule figures of this many comparisons, the newest, and
    # the queue depths of this many, the deepest: each is a label value, and Prometheus slows
    # with too many series.
    metrics_max_comparisons: int = Field(default=100, ge=0, le=10_000)
    # Webhooks of decision rules (docs/design/webhooks.md): where they may go (public addresses
    # and the networks listed; private, loopback, link-local and metadata addresses are refused
    # unless listed), how long a try may take, how much of the answer is read, how often and
    # how soon a failed delivery is tried again, how many wait or are kept dead per comparison,
    # and how many a worker process sends at once (0: it sends none).
    webhook_allow_public: bool = True
    webhook_allowed_networks: list[str] = Field(default_factory=list)
    webhook_timeout: float = Field(default=5.0, gt=0, le=60.0)
    webhook_max_response_bytes: int = Field(default=64 * 1024, ge=0, le=16 * 1024 * 1024)
    webhook_max_attempts: int = Field(default=10, ge=1, le=100)
    webhook_backoff: float = Field(default=1.0, gt=0, le=3600.0)
    webhook_backoff_max: float = Field(default=300.0, gt=0, le=86_400.0)
    webhook_outbox_max: int = Field(default=WEBHOOK_OUTBOX_MAX, ge=1, le=1_000_000)
    dead_deliveries_kept: int = Field(default=DEAD_DELIVERIES_KEPT, ge=1, le=1_000_000)
    webhook_concurrency: int = Field(default=4, ge=0, le=256)
    # CPU seconds one chunk's update may take, counted on the worker thread that runs it, so a
    # busy host does not use the budget up (checked between annealing and move steps); past it
    # the update fails like a poison chunk (attempts, then dead letter).
    update_budget: float = Field(default=30.0, gt=0)
    # Lanes (docs/design/lanes.md): threads per worker process, each serving comparisons on its
    # own, so a costly update holds one lane, not the worker. With two or more, lane 0 is the
    # express lane: it serves only comparisons whose last chunk took at most
    # express_lane_seconds CPU seconds (an unmeasured one is tried there, and moves to the
    # other lanes, without losing an attempt, once its update passes that).
    worker_lanes: int = Field(default=2, ge=1, le=64)
    express_lane_seconds: float = Field(default=1.0, gt=0)
    # HTTP server (uvicorn) and Redis pool limits.
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)  # request line and headers
    keep_alive_timeout: float = Field(default=5.0, gt=0)  # idle keep-alive connections close
    request_read_timeout: float = Field(default=10.0, gt=0)  # headers and body must arrive
    max_connections: int = Field(default=1000, ge=1)  # past it an idle one makes room, or 503
    # Open websockets, counted in max_connections too: below it, so that HTTP keeps the rest.
    max_websockets: int = Field(default=500, ge=1)
    redis_pool_size: int = Field(default=100, ge=1)
    redis_pool_timeout: float = Field(default=5.0, gt=0)  # a request waits this long for one
    # Every process's Redis client: a reply (or a connect) that takes longer is a lost
    # connection. At least twice BLOCK_MAX, the longest any command the service sends blocks.
    redis_socket_timeout: float = Field(default=SOCKET_TIMEOUT, ge=2 * BLOCK_MAX, le=600.0)
    # Access control (docs/guide/security.md): key -> {"read": [...], "write": [...]}, patterns over
    # comparison ids and names; empty: no keys needed. CORS is off unless origins are listed.
    api_keys: dict[str, KeyScope] = Field(default_factory=dict, repr=False)  # keys: secrets
    cors_origins: list[str] = Field(default_factory=list)
    # A chunk whose update fails this many times is dead-lettered; then "halt" stops the
    # comparison until POST .../resume, "skip" leaves the chunk out and goes on.
    poison_policy: Literal["halt", "skip"] = "halt"
    poison_max_attempts: int = Field(default=3, ge=1)
    # "model": a chunk that fails only in some models' own updates (they raise or lose
    # finiteness; not a compute-budget overrun) fails those models after the attempts and goes
    # on with the others; "chunk": any failure makes the chunk poison for every model.
    poison_scope: Literal["model", "chunk"] = "model"

    @model_validator(mode="after")
    def _one_chunk_fits(self) -> Settings:
        needed = CHUNK_BODY_COST * self.max_body_bytes
        if self.max_inflight_bytes < needed:
            raise ValueError(
                f"max_inflight_bytes ({self.max_inflight_bytes:,}) must hold one chunk of "
                f"max_body_bytes: at least {CHUNK_BODY_COST} x {self.max_body_bytes:,} = "
                f"{needed:,}")
        return self

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as exc:
                raise ValueError(f"webhook_allowed_networks: {exc}") from None
        return networks

    @property
    def webhook_allowlist(self) -> Allowlist:
        return Allowlist.of(self.webhook_allow_public, self.webhook_allowed_networks)

    @property
    def limits(self) -> Limits:
        return Limits(self.max_models, self.max_comparison_parameters, self.max_state_bytes,
                      self.max_x_dim, self.max_rules, self.max_rule_window_rows)

    @property
    def runs_worker_inline(self) -> bool:
        if self.embedded_worker is None:
            return self.redis_url is None
        return self.embedded_worker
