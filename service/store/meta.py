"""A comparison's meta record (the hash ``Keys.meta``) as the API reads it, with the waiting
record (``Keys.waiting``) that can make its status ``waiting``."""

from __future__ import annotations

from dataclasses import dataclass

from modelcompare.service.schemas import ComparisonSpec
from modelcompare.service.store.waiting import Waiting, shown_status


@dataclass(frozen=True)
class Meta:
    spec: ComparisonSpec
    version: int
    sequence: int  # chunks applied
    ingested: int  # chunks accepted
    status_reason: str | None = None  # why the comparison is degraded; None when ok
    # models ever in the spec (created, then added; a removal leaves it): what ingest checks
    models_added: int | None = None
    waiting: Waiting | None = None  # the waiting record, if one stands

    @property
    def status(self) -> str:
        return self.shown[0]

    @property
    def reason(self) -> str | None:
        """Why the status is not ``ok``; None when it is."""
        return self.shown[1]

    @property
    def shown(self) -> tuple[str, str | None]:
        return shown_status(self.status_reason, self.waiting, self.ingested > self.sequence)


def meta_from_fields(fields: list[bytes | None], waiting: bytes | None = None) -> Meta | None:
    """The meta of ``META_FIELDS`` read from ``Keys.meta``, with the ``Keys.waiting`` record."""
    spec, version, sequence, ingested, reason, added = fields
    if spec is None or version is None:
        return None
    return Meta(
        ComparisonSpec.model_validate_json(spec), int(version), int(sequence or 0),
        int(ingested or 0), reason.decode() if reason else None,
        None if added is None else int(added),
        None if waiting is None else Waiting.decode(waiting),
    )


META_FIELDS = ("spec", "version", "sequence", "next_seq", "status_reason", "models")
