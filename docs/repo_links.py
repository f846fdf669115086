"""mkdocs hook: links in files included from the repository root work in the site too.

CHANGELOG.md (included whole by docs/changelog.md through pymdownx.snippets) links to the docs
from the repository root, as GitHub renders it: ``[islands](docs/design/islands.md)``. In the
site that path is wrong, and the strict build fails on it. After the snippets are expanded, this
rewrites every ``](docs/…)`` link of a page to the same file relative to that page. Links to
other repository files are left alone, so the strict build still reports them.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor

REPO_LINK = re.compile(r"\]\(docs/([^)\s]+)\)")
current_page = ""  # the docs-relative path of the page being rendered


class RepoLinks(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        base = posixpath.dirname(current_page) or "."
        return [REPO_LINK.sub(lambda m: f"]({posixpath.relpath(m.group(1), base)})", line)
                for line in lines]


class RepoLinksExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # Markdown's name for it
        # pymdownx.snippets includes files at priority 32: rewrite what it brought in.
        md.preprocessors.register(RepoLinks(md), "repo_links", 31)


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(RepoLinksExtension())
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    global current_page
    current_page = page.file.src_uri
    return markdown
