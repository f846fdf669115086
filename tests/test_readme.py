"""The README's promises: its Python snippets run, its settings table matches the code, and
.ci/run runs exactly its test command."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from estimators import SGAISConfig

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


@pytest.mark.parametrize("index", range(len(fenced("python"))))
def test_python_snippets_run(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: see tests/estimators/conftest.py
    try:
        exec(compile(fenced("python")[index], f"README.md snippet {index}", "exec"), {})
    finally:
        torch.set_num_threads(threads)
    assert capsys.readouterr().out  # the snippet shows its results


def test_settings_table_matches_the_defaults() -> None:
    section = README.split("## Estimator settings", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, flags=re.MULTILINE)
    table = dict(rows)
    defaults = {f.name: repr(f.default) for f in dataclasses.fields(SGAISConfig)}
    assert table == defaults, "update the settings table in README.md"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    commands = [block.strip() for block in fenced("bash") if "pytest" in block]
    assert len(commands) == 1, "the README has exactly one test command"
    (command,) = commands
    script = (ROOT / ".ci" / "run").read_text()
    assert f"\n{command}\n" in script
    assert "set -euo pipefail" in script
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"
