"""The docs site (mkdocs.yml, docs/): it builds with ``mkdocs build --strict`` (broken links and
anchors, pages missing from the nav and nav entries without a page all fail it), every page is
in the nav and reachable from docs/index.md by links, the generated references equal what their
generator makes of the records today, the hand-written limits table matches the service's
settings, the Python snippets of the library pages run, and the full test command the docs give
is the README's."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from modelcompare.estimators import METHODS
from modelcompare.estimators.settings import is_advanced

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Pages whose Python snippets talk to a running server, or are one: shown, not run here (the
# README's tour and tests/service/client/test_dataframes.py run the same calls against a real
# one; tests/examples/test_webhook_receiver.py runs the decisions guide's webhook receiver).
SERVER_PAGES = {"guide/client.md", "guide/formulas.md", "guide/decisions.md"}


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_reference",
                                                  DOCS / "settings_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> set[str]:
    return {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}


def nav_pages() -> list[str]:
    """Every page the nav of mkdocs.yml names, in order."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [page for item in entry for page in walk(item)]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in walk(value)]
        return []

    return walk(config["nav"])


LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)\s]*)?\)")


def linked_pages(page: str) -> set[str]:
    """The docs pages ``page`` links to (relative links only; links leaving docs/ dropped)."""
    text = (DOCS / page).read_text()
    base = (DOCS / page).parent
    found = set()
    for target in LINK.findall(text):
        if "://" in target:
            continue
        path = (base / target).resolve()
        if path.is_relative_to(DOCS):
            found.add(path.relative_to(DOCS).as_posix())
    return found


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    nav = nav_pages()
    assert len(nav) == len(set(nav)), "a page is twice in the nav"
    assert set(nav) - pages() == set(), "nav entries without a page (mkdocs.yml)"
    assert pages() - set(nav) == set(), "pages missing from the nav (mkdocs.yml)"


def test_every_page_is_reachable_from_the_index() -> None:
    seen, todo = {"index.md"}, ["index.md"]
    while todo:
        for target in linked_pages(todo.pop()) - seen:
            if (DOCS / target).is_file():
                seen.add(target)
                todo.append(target)
    assert pages() - seen == set(), "pages no link path from docs/index.md reaches"


def test_the_settings_references_are_generated_from_the_records() -> None:
    module = generator()
    assert (DOCS / "reference" / "settings.md").read_text() == module.render(), (
        "run python docs/settings_reference.py")
    assert (DOCS / "reference" / "service-settings.md").read_text() == module.render_service(), (
        "run python docs/settings_reference.py")


def test_the_settings_reference_lists_the_everyday_settings_first() -> None:
    page = (DOCS / "reference" / "settings.md").read_text()
    sections = [line for line in page.splitlines() if line.startswith("## ")]
    assert sections == ["## Everyday settings", "## Advanced settings"]
    everyday = page.split("## Everyday settings")[1].split("## Advanced settings")[0]
    named = set(re.findall(r"^\| `(\w+)` \|", everyday, re.MULTILINE))
    records = [METHODS[m].settings for m in METHODS]
    assert named == {name for record in records for name, field in record.model_fields.items()
                     if not is_advanced(field)}
    advanced = page.split("## Advanced settings")[1]
    assert "`delta` (library only)" in advanced and "`false` (library only)" in advanced


def test_the_limits_table_matches_the_service_settings() -> None:
    """Every row of docs/guide/limits.md names a setting and gives its default as the service
    settings reference writes it; every limit setting of the reference has a row."""
    module = generator()
    text = (DOCS / "guide" / "limits.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]+?) \|", text, flags=re.MULTILINE))
    assert rows
    for name, default in rows.items():
        assert default == module.service_default(name.lower()), name
    limits = next(meanings for heading, _, meanings in module.SERVICE_GROUPS
                  if heading == "Limits")
    assert {name.upper() for name in limits} == set(rows)


def _fenced(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)


SNIPPETS = [(page, index, code) for page in sorted(pages() - SERVER_PAGES)
            for index, code in enumerate(_fenced(page, "python"))]


# guide/writing-models.md imports the example plugin, which its reader installs first
# (pip install ./examples/modelcompare-example-models): its sources on the path stand in.
PLUGIN_SOURCES = ROOT / "examples" / "modelcompare-example-models" / "src"


@pytest.mark.parametrize(("page", "index", "code"), SNIPPETS,
                         ids=[f"{page}:{index}" for page, index, _ in SNIPPETS])
@pytest.mark.slow
def test_python_snippets_run(page: str, index: int, code: str, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_SOURCES))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: see tests/conftest.py
    try:
        exec(compile(code, f"docs/{page} snippet {index}", "exec"), {})
    finally:
        torch.set_num_threads(threads)
    assert capsys.readouterr().out  # the snippet shows its results


def test_the_docs_full_test_command_is_the_readmes() -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = [block.strip() for block in re.findall(r"```bash\n(.*?)```", readme,
                                                        flags=re.DOTALL) if "pytest" in block]
    docs = [block.strip() for block in _fenced("guide/development.md", "console")
            if "pip install" in block and "pytest" in block]
    assert docs == [command]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``, offline: material without web fonts, nothing fetched."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # material's banner, not a warning
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").is_file()
