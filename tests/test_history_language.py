"""No development-history language in the tree.

Docs, docstrings, comments, test names and result file names state the reason for a choice or a
fact that is true now, never where it came from: no numbered development stops (the word "stop"
and a number), no issue numbers ("issue" and a number, with or without "#"), no run names in
file names ("accuracy_stop38.json") and no commit ids. A comment that needs a reason gives it,
briefly, or cites a design note under docs/design/.

Every file git knows of (tracked, or new and not ignored) is read as UTF-8; binaries (anything
that does not decode) are skipped. The checks:

- every file's text, JSON included: "stop"/"issue" followed by a number (``HISTORY``);
- every file's path: a run name or a commit id in a file or folder name (``name_matches``);
- every text file but JSON, whose commit fields are data: the word commit followed by a
  7-40 digit hex id (``COMMIT``);
- Markdown: any free-standing 7-40 digit hex token that mixes digits and letters, the shape of
  an abbreviated commit id (``MARKDOWN_HEX``); tokens joined to a path, URL, digest prefix,
  identifier or colour (``/``, ``.``, ``:``, ``_``, ``-``, ``#``, ``@``, ``x`` beside them) are
  data and do not count.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()  # its examples are the point

# The word stop(s) or issue(s) and a number, after a space, a line break, "#", "-" or nothing,
# and a run name inside a file name: "calibration_stop27_linear.json", "accuracy_1e5_issue17.json".
# A hyphen counts only before two digits, so that arithmetic like ``stop-1`` is not flagged.
HISTORY = re.compile(
    r"(?i)(?<![a-z0-9])(?:stops?|issues?)(?:\s+#?|\s*#|_|-(?=[0-9]{2})|)[0-9]+"
)

# 7-40 hex digits with at least one digit and one letter a-f: an abbreviated or full commit id.
# Requiring both leaves out plain numbers ("67108864") and words ("defaced").
HEX = r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
COMMIT = re.compile(
    rf"(?i)\bcommit(?:s|ted)?\b(?:\s+(?:as|at|id|is|of|on|was))?[\s:`'\"(#@]{{1,4}}{HEX}"
    r"(?![0-9a-z])"
)
MARKDOWN_HEX = re.compile(rf"(?<![0-9A-Za-z_./:#@-]){HEX}(?![0-9A-Za-z_/:@-])")
# The same shape as a whole part of a file name: "accuracy_1e5_main_25df8fb.json".
NAME_HEX = re.compile(rf"(?:^|[_.-]){HEX}(?=$|[_.-])")


def history_matches(text: str, path: str = "") -> list[tuple[int, str]]:
    """(line, matched text) of every history reference in ``text``, the contents of ``path``."""
    patterns = [HISTORY]
    if not path.endswith(".json"):
        patterns.append(COMMIT)
    if path.endswith(".md"):
        patterns.append(MARKDOWN_HEX)
    found = {
        (text.count("\n", 0, match.start()) + 1, match.start(), text[match.start():match.end()])
        for pattern in patterns
        for match in pattern.finditer(text)
    }
    return [(line, hit) for line, _, hit in sorted(found)]


def name_matches(path: str) -> bool:
    """Whether a file or folder name in ``path`` carries a run name or a commit id."""
    return any(
        re.search(r"(?i)(?<![a-z])(?:stop|issue)[_-]?[0-9]", part) or NAME_HEX.search(part)
        for part in path.split("/")
    )


def repository_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({name for name in listed.decode().split("\0") if name})


@pytest.mark.parametrize("text", [
    "see Stop\x2027",
    "stop\x203 of the run",
    "stops\x2028–29 tried it",
    "Stop\x2041's final code",
    "as at STOP\x209",
    "(issue\x2018)",
    "issue\x20#4",
    "issues\x2017 and 18",
    "benchmarks/README.md, \"Stop\n36\")",
    "the stop-26 engine",
    "results/calibration_stop27_m256_linear_iid.json",
    "def test_issue17_regression():",
    "accuracy_1e5_issue17.json",
    "What changed (commit 250aca7):",
    "commits e437d4f, 75b677b",
    "on any commit: f8da791",
    "Committed as `1f6b7cc`",
    "commit 0123456789abcdef0123456789abcdef01234567",
])
def test_matcher_finds(text: str) -> None:
    assert history_matches(text, "notes.txt")


@pytest.mark.parametrize("text", [
    "Stops on SIGTERM or Ctrl-C.",
    "the run stops once CESS/M is below the target",
    "def slice(self, start: int, stop: int) -> Rows:",
    "x[start:stop-1]",
    "range(start, stop - 1)",
    '{"stop": 3, "stops": [1, 2]}',
    "restart: unless-stopped",
    "stop_rows = 3",
    "a known issue: the stream must be sorted",
    "every commit bumps the version by 1",
    "version: rises with every commit",
    'MODELCOMPARE_MAX_STATE_BYTES: "67108864"',
    'any(c not in "0123456789abcdef" for c in hexdigest)',
    "a commit of 1000000 rows",
    "the commit deadbeefcafe is all letters",
])
def test_matcher_passes(text: str) -> None:
    assert history_matches(text, "notes.txt") == []


@pytest.mark.parametrize("text", [
    "the engine of 6044cff",
    "beside `25df8fb`",
    "| 152f4c4 | 0.75 |",
])
def test_markdown_hex_is_flagged_in_markdown_only(text: str) -> None:
    assert history_matches(text, "docs/design/notes.md")
    assert history_matches(text, "service/notes.py") == []


@pytest.mark.parametrize("text", [
    "keys are `sha256:9f86d081884c7d659a2feaa0c55ad015` digests",
    "see https://example.org/blob/9f86d08/README.md",
    "colour #1f77b4ff",
    "id 123e4567-e89b-12d3-a456-426614174000",
    "an API key like mc_3f9a2c1b7d",
    "log Z at 1e6 rows: 95,285 points/s",
    "sha256 of the empty string: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
])
def test_markdown_data_is_not_a_commit(text: str) -> None:
    assert history_matches(text, "README.md") == []


@pytest.mark.parametrize(("path", "flagged"), [
    ("benchmarks/results/abuse_stop38.json", True),
    ("benchmarks/results/accuracy_1e5_issue17.json", True),
    ("benchmarks/results/accuracy_1e5_main_25df8fb.json", True),
    ("benchmarks/results/accuracy_stop26_1e6_15seeds_152f4c4.json", True),
    ("tests/test_stop38.py", True),
    ("benchmarks/results/accuracy_1e6.json", False),
    ("benchmarks/results/calibration_linear_iid_seed100.json", False),
    ("service/__main__.py", False),
    ("service/static/dashboard.css", False),
    ("tests/faults/test_restart.py", False),
])
def test_name_matcher(path: str, flagged: bool) -> None:
    assert name_matches(path) is flagged


def test_no_history_language() -> None:
    started = time.perf_counter()
    problems: list[str] = []
    for name in repository_files():
        if name == SELF:
            continue
        if name_matches(name):
            problems.append(f"{name}: run name or commit id in the file name")
        try:
            text = (ROOT / name).read_bytes().decode("utf-8")
        except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
            continue  # deleted in the working tree, a submodule, or a binary
        problems.extend(f"{name}:{line}: {hit!r}" for line, hit in history_matches(text, name))
    assert time.perf_counter() - started < 30
    assert not problems, (
        f"{len(problems)} development-history reference(s); state the reason or cite a design "
        "note (docs/design/*.md) instead:\n" + "\n".join(problems)
    )
