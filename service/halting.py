"""The commit that halts a comparison on a chunk given up on (``poison_policy="halt"``)."""

from __future__ import annotations

from service.evidence import evidence_body, model_summaries
from service.store.queue import Commit, DeadLetter, Entry, Snapshot


def halt_commit(cid: str, snap: Snapshot, entry: Entry, message: str,
                letter: DeadLetter) -> Commit:
    """Record the dead letter and stop on ``entry``: the last good state is kept and served,
    the comparison reports itself degraded with the reason, until an operator resumes it."""
    reason = (f"halted at chunk {entry.sequence}: it failed {letter.attempts} attempt(s), last "
              f"{message}; later chunks wait for POST /v1/comparisons/{cid}/resume")
    body = evidence_body(snap.spec, model_summaries(snap.evidence),
                         version=snap.version + 1, sequence=snap.sequence,
                         n_observations=snap.evidence["n_observations"],
                         last_error={"sequence": entry.sequence, "message": message},
                         status_reason=reason,
                         skipped_chunks=snap.evidence.get("skipped_chunks", 0),
                         halted_at=entry.sequence)
    return Commit(version=snap.version, sequence=entry.sequence, entry_id=entry.id,
                  block=b"", evidence=body, trace=None, states={},
                  catching_up=sum(bool(m["catching_up"]) for m in snap.evidence["models"]),
                  status_reason=reason, halt=True, dead_letter=letter)
