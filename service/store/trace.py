"""Trace points (one per applied chunk, GET /history) stored as compact JSON arrays.

A point as the API shows it names every field of every model; stored, the names are positional:
``[sequence, version, n_observations, compute_seconds, [[model, *MODEL_FIELDS values], ...]]``,
about half the bytes for two models. Points stored as objects by earlier versions still read;
so do arrays stored before the later fields of ``MODEL_FIELDS`` were added (those read null) and,
during a rolling upgrade, arrays a newer worker wrote with fields added after these (left out).
"""

from __future__ import annotations

import json
from typing import Any

MODEL_FIELDS = ("log_evidence", "log_evidence_stderr", "n_observations", "ess",
                "annealing_steps", "diverged_fraction", "spread")


def encode_point(point: dict[str, Any]) -> str:
    models = [[name, *(summary[field] for field in MODEL_FIELDS)]
              for name, summary in point["models"].items()]
    return json.dumps([point["sequence"], point["version"], point["n_observations"],
                       point["compute_seconds"], models], allow_nan=False,
                      separators=(",", ":"))


def decode_point(raw: bytes | str) -> dict[str, Any]:
    stored = json.loads(raw)
    if isinstance(stored, dict):
        return stored
    sequence, version, n_observations, seconds, models = stored
    return {"sequence": sequence, "version": version, "n_observations": n_observations,
            "compute_seconds": seconds,
            "models": {name: _model_fields(values) for name, *values in models}}


def _model_fields(values: list[Any]) -> dict[str, Any]:
    return {field: values[i] if i < len(values) else None for i, field in enumerate(MODEL_FIELDS)}
