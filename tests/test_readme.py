"""The README's promises: the five-minute tour runs verbatim against a server it starts, the
other Python snippets run, and .ci/run runs exactly its test command. Also the tables the docs
keep by hand beside the code: the model families (docs/guide/models.md) and the estimator
settings reference (docs/reference/settings.md, generated: see tests/test_docs.py)."""

from __future__ import annotations

import inspect
import os
import re
import signal
import socket
import subprocess
import sys
import typing
from pathlib import Path

import annotated_types
import pytest
import torch

from modelcompare.estimators import METHODS
from modelcompare.models import FAMILIES, ModelConfigError
from modelcompare.service.schemas import REFUSED

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MODELS_PAGE = ROOT / "docs" / "guide" / "models.md"
SETTINGS_PAGE = ROOT / "docs" / "reference" / "settings.md"


TOUR_HEADING = "## Five-minute tour"


def fenced(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def section(heading: str) -> str:
    return README.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def tour_script() -> str:
    """The tour's shell and Python blocks in order, as one bash script (Python through stdin)."""
    blocks = re.findall(r"```(bash|python)\n(.*?)```", section(TOUR_HEADING), flags=re.DOTALL)
    assert blocks, "the README has a five-minute tour"
    parts = ["set -euo pipefail"]  # any failing command fails the test
    for language, code in blocks:
        parts.append(code if language == "bash" else f"python - <<'README_PYTHON'\n{code}"
                     "README_PYTHON")
    return "\n".join(parts) + "\n"


LIBRARY_SNIPPETS = [code for code in fenced("python")
                    if code not in fenced("python", section(TOUR_HEADING))]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(LIBRARY_SNIPPETS)))
def test_python_snippets_run(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: see tests/conftest.py
    try:
        exec(compile(LIBRARY_SNIPPETS[index], f"README.md snippet {index}", "exec"), {})
    finally:
        torch.set_num_threads(threads)
    assert capsys.readouterr().out  # the snippet shows its results


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.e2e
def test_the_five_minute_tour_runs_verbatim(tmp_path: Path) -> None:
    """In a scratch folder, with the environment's ``python`` and ``modelcompare`` first on PATH
    and no Redis or server settings inherited: the tour's blocks, as written."""
    if _port_in_use(8000):
        message = "port 8000, which the tour uses, is taken"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    unset = ("REDIS_URL", "MODELCOMPARE_REDIS_URL", "MODELCOMPARE_URL", "MODELCOMPARE_API_KEY",
             "MODELCOMPARE_API_KEYS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               MODELCOMPARE_TORCH_THREADS="1", COLUMNS="120")
    # Files, not pipes: the server left in the background would hold pipes open.
    with (tmp_path / "out.txt").open("w") as stdout, (tmp_path / "err.txt").open("w") as stderr:
        process = subprocess.Popen(["bash", "-c", tour_script()], cwd=tmp_path, env=env,
                                   stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            process.wait(timeout=240)
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # that server, and anything left running
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert process.returncode == 0, f"{out}\n{err}"
    assert '"n_observations":3' in out  # the curl chunk, applied
    assert '"mixture":{"mean":[' in out  # the BMA prediction
    assert "sent 500 rows of data.csv in 5 chunks" in err  # modelcompare ingest
    assert "sent no rows of data.csv: all 500 were already ingested (5 chunks): skipped" in err
    assert "500 rows, 5 chunks, version 5, status ok" in out  # modelcompare watch
    assert "  cli-tour · 4 models · sgais · 5 chunks applied · created " in out  # list
    assert "row,mean,variance,baseline:mean,baseline:variance,first:mean" in out  # predict
    assert "added model 'noisy' to " in err and "replays the 500 rows stored" in err
    assert "removed model 'baseline' from " in err and "left: first, second, both, noisy" in err
    assert "snapshot 200\n" in out and "update 210\n" in out  # the websocket, AsyncClient
    assert "422 invalid_chunk rows of x need 2 numbers, got 1" in out


def _family_tables() -> dict[str, list[tuple[str, str, str]]]:
    """(key, type, default) rows of each family's table, under its "## `family`" heading of
    docs/guide/models.md."""
    text = MODELS_PAGE.read_text()
    return {family: re.findall(r"^\| `(\w+)` \| ([^|]+?) \| (`[^`]*`|required) \|", body,
                               flags=re.MULTILINE)
            for family, body in re.findall(r"^## `(\w+)`\n(.*?)(?=^## |\Z)", text,
                                           flags=re.MULTILINE | re.DOTALL)}


def test_model_family_tables_match_the_code() -> None:
    """Every family is documented with exactly its constructor's keys and defaults, and each
    integer's range in the table is the range its config record accepts (one step outside is
    refused)."""
    tables = _family_tables()
    assert set(tables) == set(FAMILIES)
    for family, rows in tables.items():
        parameters = inspect.signature(FAMILIES[family].__init__).parameters
        code = {name: "required" if p.default is p.empty else f"`{p.default!r}`"
                for name, p in parameters.items() if name != "self"}
        assert {key: default for key, _, default in rows} == code, family
        ranges = {key: (int(m.group(1)), int(m.group(2).replace(",", ""))) for key, kind, _ in rows
                  if (m := re.fullmatch(r"integer (\d+)–([\d,]+)", kind))}
        assert set(ranges) | {k for k, kind, _ in rows if kind == "number > 0"} == set(code)
        schema = FAMILIES[family].Config.model_json_schema()["properties"]
        for key, (low, high) in ranges.items():
            assert (schema[key]["minimum"], schema[key]["maximum"]) == (low, high), (family, key)
        valid = {key: ranges.get(key, (1.0,))[0] for key in code}
        FAMILIES[family](**valid)
        for key, (low, high) in ranges.items():
            for outside in (low - 1, high + 1):
                with pytest.raises(ModelConfigError):
                    FAMILIES[family](**{**valid, key: outside})


def setting_range(record: type, name: str) -> str:
    """How the settings reference writes a setting's range: [low, high] (brackets open where the
    bound is strict), its choices, or its booleans; a value the API refuses is library only."""
    field = record.model_fields[name]
    refused = REFUSED[name].value if name in REFUSED else None

    def choice(value: object) -> str:
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        return f"`{shown}`" + (" (library only)" if value == refused else "")

    if field.annotation is bool:
        return f"{choice(True)}, {choice(False)}"
    if typing.get_origin(field.annotation) is typing.Literal:
        return ", ".join(choice(value) for value in typing.get_args(field.annotation))
    if field.annotation is str:
        return "`cpu`, `cuda[:k]`"
    number = (lambda v: f"{v:_}") if field.annotation is int else (lambda v: f"{v:g}")
    low = high = ""
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge | annotated_types.Gt):
            strict = isinstance(bound, annotated_types.Gt)
            low = ("(" if strict else "[") + number(getattr(bound, "gt" if strict else "ge"))
        if isinstance(bound, annotated_types.Le | annotated_types.Lt):
            strict = isinstance(bound, annotated_types.Lt)
            high = number(getattr(bound, "lt" if strict else "le")) + (")" if strict else "]")
    return f"{low}, {high}"


def test_settings_tables_match_the_records() -> None:
    """One row per (setting, methods) with the record's default and bounds; every setting of
    every method in exactly one row of docs/reference/settings.md."""
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \| ([^|]+) \| ([\w, ]+) \|",
                      SETTINGS_PAGE.read_text(), flags=re.MULTILINE)
    table: dict[tuple[str, str], tuple[str, str]] = {}
    for name, default, bounds, methods in rows:
        for method in methods.split(", "):
            assert (method, name) not in table, f"{method}.{name} is in two rows"
            table[method, name] = (default, bounds.strip())
    expected = {
        (method, name): (repr(field.default), setting_range(entry.settings, name))
        for method, entry in METHODS.items()
        for name, field in entry.settings.model_fields.items()
    }
    assert table == expected, "run python docs/settings_reference.py"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    commands = [block.strip() for block in fenced("bash") if "pytest" in block]
    assert len(commands) == 1, "the README has exactly one test command"
    (command,) = commands
    script = (ROOT / ".ci" / "run").read_text()
    assert f"\n{command}\n" in script
    assert "set -euo pipefail" in script
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"
