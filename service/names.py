"""What every request record shares: strict JSON, and the rule for names of models and rules."""

from __future__ import annotations

from pydantic import ConfigDict

# at least one character that is not a dot: "." and ".." are path segments a URL resolves away
# (DELETE …/models/.. would reach …/{id}, the comparison itself)
NAME_PATTERN = r"^[A-Za-z0-9_.\-]*[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$"
NAME_MAX_CHARS = 64
STRICT_JSON = ConfigDict(extra="forbid", strict=True)
