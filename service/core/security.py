"""API keys with per-comparison scopes.

A key grants ``read`` and ``write`` scopes: lists of patterns (``fnmatch`` style: ``*``, ``?``,
``[seq]``) matched against a comparison's id or its name; ``"*"`` is every comparison. Keys are
kept only as SHA-256 digests; an operator may configure the digest itself (``"sha256:<hex>"``)
so that the plain key never appears in the environment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers

Action = Literal["read", "write"]
DIGEST_PREFIX = "sha256:"


class KeyScope(BaseModel):
    """What one key may do: comparison id or name patterns it may read, and may write."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)

    def patterns(self, action: Action) -> list[str]:
        return self.read if action == "read" else self.write

    def everything(self, action: Action) -> bool:
        return "*" in self.patterns(action)

    def allows(self, action: Action, *identifiers: str | None) -> bool:
        """True when a pattern of ``action`` matches one of the ids or names given."""
        return self.everything(action) or any(
            fnmatchcase(identifier, pattern)
            for pattern in self.patterns(action)
            for identifier in identifiers
            if identifier is not None
        )


ALL = KeyScope(read=["*"], write=["*"])  # what every caller may do when no key is configured


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Keyring:
    """Looks a presented key up by its digest (no plain keys kept, no timing on the key)."""

    def __init__(self, keys: Mapping[str, KeyScope]) -> None:
        self._scopes: dict[str, KeyScope] = {}
        for key, scope in keys.items():
            if key.startswith(DIGEST_PREFIX):
                hexdigest = key.removeprefix(DIGEST_PREFIX).lower()
                if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
                    raise ValueError(f"{key!r} is not sha256: followed by 64 hex digits")
                self._scopes[hexdigest] = scope
            else:
                self._scopes[digest(key)] = scope

    def identify(self, key: str | None) -> KeyScope | None:
        return None if not key else self._scopes.get(digest(key))


def bearer_token(headers: Headers) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, else None."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
