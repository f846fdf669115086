"""``modelcompare --help`` and ``--version`` start without the service: building the parser
imports none of torch, numpy, httpx, redis, fastapi or pydantic-settings (together ~1.5 s), and
a command's ``--help`` never imports torch. Every command's help still prints in full."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from modelcompare.service.cli import main

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = Path(sys.executable).with_name("modelcompare")  # the console script, if installed
HEAVY = {"torch", "numpy", "httpx", "redis", "fastapi", "pydantic_settings"}
COMMANDS = ("serve", "worker", "demo", "create", "add-model", "remove-model", "ingest", "watch",
            "list", "families", "delete", "predict", "check-model")


def _run_profiled(command: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``command``'s result and the top-level packages it imported (Python's import profile)."""
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
                          capture_output=True, text=True, timeout=120)
    imported = {line.rpartition("|")[2].strip().split(".")[0]
                for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, imported


def test_version_imports_nothing_heavy() -> None:
    done, imported = _run_profiled([sys.executable, "-m", "modelcompare", "--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"modelcompare {version('modelcompare')}\n"
    assert "modelcompare" in imported  # the profile covers the command's own imports
    assert imported.isdisjoint(HEAVY), sorted(imported & HEAVY)


@pytest.mark.skipif(not SCRIPT.is_file(), reason="the console script is not installed")
def test_help_imports_nothing_heavy() -> None:
    done, imported = _run_profiled([str(SCRIPT), "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: modelcompare")
    assert "modelcompare" in imported
    assert imported.isdisjoint(HEAVY), sorted(imported & HEAVY)


def test_the_command_list_is_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "modelcompare", "no-such-command"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    choices = done.stderr.partition("choose from ")[2].strip().rstrip(")")
    assert choices.replace("'", "").split(", ") == list(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _help(command, capsys).startswith(f"usage: modelcompare {command} ")


def test_help_texts_name_the_defaults_of_settings_and_client(
        capsys: pytest.CaptureFixture[str]) -> None:
    from modelcompare.service.client import API_KEY_ENV, DEFAULT_URL, URL_ENV
    from modelcompare.service.core.config import Settings

    serve, create = (_help(command, capsys) for command in ("serve", "create"))
    port = Settings.model_fields["port"].default
    assert f"(env MODELCOMPARE_PORT; default {port})" in serve
    assert f"(env {URL_ENV}; default {DEFAULT_URL})" in create
    assert f"(env {API_KEY_ENV})" in create


def test_no_command_help_imports_torch() -> None:
    """The help texts read from the settings and the client, never from a command's module."""
    code = ("import contextlib, io, sys\n"
            "from modelcompare.service.cli import main\n"
            f"for command in {COMMANDS!r}:\n"
            "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "        main([command, '--help'])\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``modelcompare COMMAND --help`` in this process, on one line (its wrapping undone)."""
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())
