"""Settings from the environment (``MODELCOMPARE_`` prefix; ``REDIS_URL`` is accepted too)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.core.security import KeyScope


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
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    wait_timeout: float = Field(default=30.0, gt=0)
    # `modelcompare serve` exits within this many seconds of SIGTERM (service/api/shutdown.py),
    # plus the embedded Redis' own shutdown.
    shutdown_timeout: float = Field(default=5.0, gt=0)
    idempotency_ttl: float = Field(default=24 * 3600.0, gt=0)
    lease_ttl: float = Field(default=30.0, gt=0)  # a worker's hold on one comparison
    poll_interval: float = Field(default=0.5, gt=0)
    batch_chunks: int = Field(default=16, ge=1)  # chunks a worker applies per lease
    history_cache: int = Field(default=16, ge=1)  # comparisons whose history a worker caches
    torch_threads: int | None = Field(default=None, ge=1)  # intra-op threads; None: torch's
    # Access control (README "Security"): key -> {"read": [...], "write": [...]}, patterns over
    # comparison ids and names; empty: no keys needed. CORS is off unless origins are listed.
    api_keys: dict[str, KeyScope] = Field(default_factory=dict, repr=False)  # keys: secrets
    cors_origins: list[str] = Field(default_factory=list)
    # A chunk whose update fails this many times is dead-lettered; then "halt" stops the
    # comparison until POST .../resume, "skip" leaves the chunk out and goes on.
    poison_policy: Literal["halt", "skip"] = "halt"
    poison_max_attempts: int = Field(default=3, ge=1)

    @property
    def runs_worker_inline(self) -> bool:
        if self.embedded_worker is None:
            return self.redis_url is None
        return self.embedded_worker
