"""Writes this platform's digests of the golden streams, ``expected/<platform>.json`` (see
``test_golden.py``, which says when this may be done: only for a change meant to alter results,
or on unchanged code for a platform with no file yet; never to make a refactoring pass).

    python tests/estimators/golden/regenerate.py

Each stream is run twice; nothing is written unless both runs agree. What moved is printed: per
stream, the first chunk that departs from the file as it was.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import golden_streams

EXPECTED = Path(__file__).with_name("expected") / f"{golden_streams.platform_key()}.json"


def first_change(old: list[dict], new: list[dict]) -> str:
    for chunk, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return f"changed from chunk {chunk}"
    return "unchanged" if len(old) == len(new) else f"{len(old)} chunks, now {len(new)}"


def main() -> int:
    document = golden_streams.expected_document()
    again = golden_streams.expected_document()
    if document != again:
        streams, other = document["streams"], again["streams"]
        differing = [name for name in streams if streams[name] != other[name]]
        print(f"two runs in one process differ ({differing}): nothing written", file=sys.stderr)
        return 1
    # as the test reads it back: the JSON round trip
    document = json.loads(json.dumps(document))
    before = json.loads(EXPECTED.read_text())["streams"] if EXPECTED.exists() else {}
    for name, stream in document["streams"].items():
        old = before.get(name)
        change = "new" if old is None else first_change(old["chunks"], stream["chunks"])
        print(f"{name}: {change}")
    EXPECTED.parent.mkdir(exist_ok=True)
    EXPECTED.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
