"""House rules a reviewer would otherwise check by hand: the code is ruff clean, modules that do
one thing stay short, and no module imports another's private names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("modelcompare", "estimators", "models", "service", "benchmarks", "tests")
MAX_LINES = 300  # per file in estimators/ and models/


def test_ruff_check_passes() -> None:
    """The README's lint command, run the way the ``test`` extra installs ruff."""
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stdout + found.stderr


def sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", ["estimators", "models"])
def test_engine_files_stay_under_the_line_limit(package: str) -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in sources(package)
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [
                f"from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")
            ]
            if node.module and any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Import):
            found += [
                f"import {a.name}"
                for a in node.names
                if any(part.startswith("_") for part in a.name.split("."))
            ]
    return found


@pytest.mark.slow
def test_no_private_names_are_imported_across_modules() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sources(*PACKAGES)
        if (found := private_imports(path))
    }
    # benchmarks/ import their shared helpers from ``_common`` (a script folder, not a package:
    # the underscore keeps it from being taken for a benchmark).
    offenders = {
        path: [line for line in found if not line.startswith("from _common")]
        for path, found in offenders.items()
    }
    assert not {path: found for path, found in offenders.items() if found}


def test_test_modules_have_unique_names() -> None:
    """pytest imports test modules the default way (``rootdir`` import mode, no ``__init__.py``
    under tests/): each test file's folder goes on ``sys.path`` and the file is imported by its
    bare name, which is also how the helpers (``service_server``, ``fault_processes``…) are
    found. Two test files with one name in different folders would collide."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not list((ROOT / "tests").rglob("__init__.py"))
