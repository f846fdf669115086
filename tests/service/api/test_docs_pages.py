"""/docs (Swagger UI) and /redoc render in headless Chromium with every request off this machine
blocked: their scripts, styles and icon come from the server. Swagger UI asks for nothing else;
ReDoc only for its "API docs by Redocly" logo, which it hides when that fails. Screenshots go to
test-artifacts/docs.png and test-artifacts/redoc.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Route
from service_server import StartServer

pytestmark = pytest.mark.e2e

LOCAL = {"127.0.0.1", "localhost"}
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.fixture
def offline_page(browser: Browser) -> Iterator[tuple[Page, list[str], list[str]]]:
    """A page whose requests to other hosts are aborted (and listed), with its console errors."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    external: list[str] = []
    errors: list[str] = []

    def only_local(route: Route) -> None:
        if urlsplit(route.request.url).hostname in LOCAL:
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page, external, errors
    context.close()


def test_swagger_ui_and_redoc_render_without_internet(
    offline_page: tuple[Page, list[str], list[str]], start_server: StartServer, artifacts: Path
) -> None:
    page, external, errors = offline_page
    server = start_server("embedded")
    page.goto(f"{server.url}/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = set(page.locator(".opblock-summary-path").all_inner_texts())
    assert {"/v1/comparisons", "/v1/comparisons/{cid}/chunks", "/metrics"} <= paths
    page.locator("#operations-comparisons-create_comparison .opblock-summary").click()
    page.wait_for_selector("#operations-comparisons-create_comparison .responses-table")
    codes = page.locator("#operations-comparisons-create_comparison .response-col_status")
    assert {"201", "415", "422"} <= {c.strip() for c in codes.all_inner_texts()}
    assert page.get_by_text("LinearRegressionConfig", exact=True).count() >= 1  # schemas
    page.screenshot(path=str(artifacts / "docs.png"), full_page=False)
    assert (artifacts / "docs.png").stat().st_size > 10_000
    assert external == []
    assert errors == []

    page.goto(f"{server.url}/redoc")
    page.locator("h2", has_text="Create Comparison").wait_for(timeout=30_000)
    page.get_by_text("LinearRegressionConfig").first.wait_for(state="attached")
    page.screenshot(path=str(artifacts / "redoc.png"), full_page=False)
    assert set(external) <= {REDOC_LOGO}
    assert page.locator(f'img[src="{REDOC_LOGO}"]').count() == 0  # hidden once it failed
    assert [e for e in errors if "net::ERR_FAILED" not in e] == []
