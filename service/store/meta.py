"""A comparison's meta record (the hash ``Keys.meta``) as the API reads it."""

from __future__ import annotations

from dataclasses import dataclass

from modelcompare.service.schemas import ComparisonSpec


@dataclass(frozen=True)
class Meta:
    spec: ComparisonSpec
    version: int
    sequence: int  # chunks applied
    ingested: int  # chunks accepted
    status_reason: str | None = None  # why the comparison is degraded; None when ok
    # models ever in the spec (created, then added; a removal leaves it): what ingest checks
    models_added: int | None = None

    @property
    def status(self) -> str:
        return "degraded" if self.status_reason else "ok"


def meta_from_fields(fields: list[bytes | None]) -> Meta | None:
    spec, version, sequence, ingested, reason, added = fields
    if spec is None or version is None:
        return None
    return Meta(
        ComparisonSpec.model_validate_json(spec), int(version), int(sequence or 0),
        int(ingested or 0), reason.decode() if reason else None,
        None if added is None else int(added),
    )


META_FIELDS = ("spec", "version", "sequence", "next_seq", "status_reason", "models")
