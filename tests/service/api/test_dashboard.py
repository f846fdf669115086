"""The dashboard in headless Chromium (Playwright): it loads without console errors, a chunk
posted through the API reaches the chart within a second, the table shows the exact evidence,
decision events are marked on the headline chart, and the empty, catching-up and degraded
states are spelled out. A screenshot is written to
test-artifacts/dashboard.png."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, WebSocketRoute
from service_helpers import chunks, comparison_body, exact_log_evidence, regression_data
from service_server import Server, StartServer

pytestmark = pytest.mark.e2e

CHARTS_HAVE_POINTS = """(count) => [...document.querySelectorAll('.chart')].every(chart =>
    chart.data.length > 0 && chart.data.every(trace => trace.x.length === count))"""
HEADLINE_HAS_POINTS = """(models) => {
    const data = document.getElementById('chart-bayes-factor').data;
    return data !== undefined && data.length === models && data.every(t => t.x.length >= 1);
}"""
FIVE_MODELS = [
    {"name": "right", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "extra_input", "family": "linear_regression", "config": {"dim": 4}},
    {"name": "too_few", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "wrong_noise", "family": "linear_regression", "config": {"dim": 3, "noise_std": 2.0}},
    {"name": "intercept_only", "family": "linear_regression", "config": {"dim": 0}},
]


@pytest.fixture
def console_errors() -> list[str]:
    """Console errors and uncaught exceptions of the page under test."""
    return []


@pytest.fixture
def page(browser: Browser, console_errors: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            console_errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    yield page
    context.close()


def _notices(page: Page) -> list[str]:
    return page.locator("#notices .notice").all_inner_texts()


def test_a_posted_chunk_reaches_the_chart_within_a_second(
    page: Page, console_errors: list[str], embedded_server: Server
) -> None:
    server = embedded_server
    body = comparison_body("exact")
    x, y = regression_data(40, seed=3)
    x2, y2 = regression_data(60, seed=4)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        page.goto(f"{server.url}/#{cid}")
        page.wait_for_selector("#evidence-table tbody tr")
        assert page.locator("#connection").inner_text() == "live"
        assert any("No data yet" in text for text in _notices(page))
        assert page.locator("#comparison-list a[aria-current=page]").inner_text().startswith(
            "regression")

        reply = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunks(x, y, 40)[0])
        applied = time.monotonic()
        assert reply.status_code == 200, reply.text
        page.wait_for_function(HEADLINE_HAS_POINTS, arg=3, timeout=10_000)
        seconds = time.monotonic() - applied
    print(f"chunk applied -> drawn in the headline chart: {seconds * 1000:.0f} ms")
    assert seconds < 1.0, f"the chart showed the chunk after {seconds:.2f} s"
    assert not any("No data yet" in text for text in _notices(page))

    for model in body["models"]:
        row = page.locator(f"#evidence-table tr[data-model={model['name']}]")
        log_z = float(row.locator("td").nth(1).inner_text().split(" ± ")[0])
        columns = list(range(model["config"]["dim"]))
        assert log_z == pytest.approx(exact_log_evidence(model["config"], x, y, columns), abs=0.01)
        assert row.locator("td").nth(5).inner_text() == "40"
    probabilities = [float(t) for t in page.locator("#evidence-table td:nth-child(5)")
                     .all_inner_texts()]
    assert sum(probabilities) == pytest.approx(1.0, abs=2e-4)
    # the window (5000 rows by default) holds all 40 rows: windowed log BF = log BF vs best
    exact = {m["name"]: exact_log_evidence(m["config"], x, y, list(range(m["config"]["dim"])))
             for m in body["models"]}
    best = max(exact, key=lambda name: exact[name])
    for name, log_z in exact.items():
        window = page.locator(f"#evidence-table tr[data-model={name}] td").nth(9).inner_text()
        if name == best:
            assert window == "best (last 40 rows)"
        else:
            assert float(window.split(" ± ")[0]) == pytest.approx(log_z - exact[best], abs=0.01)

    with server.client() as client:  # three more chunks: every chart grows by one point each
        for chunk in chunks(x2, y2, 20):
            assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).is_success
    page.wait_for_function(CHARTS_HAVE_POINTS, arg=4, timeout=10_000)
    assert console_errors == []


EVENT_LABELS = """() => {
    const chart = document.getElementById('chart-bayes-factor');
    const layout = chart.layout || {};
    return (layout.annotations || []).filter(a => a.textangle === -90)
        .map(a => [a.text, a.x, layout.shapes.some(s => s.yref === 'paper' && s.x0 === a.x)]);
}"""


def test_decision_events_are_marked_on_the_headline_chart(
    page: Page, console_errors: list[str], embedded_server: Server
) -> None:
    server = embedded_server
    rule = {"name": "promote", "when": {"log_bayes_factor": {
        "model": "right", "against": "wrong_noise", "above": 3.0}}}
    body = {**comparison_body("exact"), "rules": [rule]}
    x, y = regression_data(80, seed=3)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        page.goto(f"{server.url}/#{cid}")
        page.wait_for_selector("#evidence-table tbody tr")
        assert page.evaluate(EVENT_LABELS) == []
        for chunk in chunks(x, y, 40):  # the rule fires on the first chunk: one event
            assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).is_success
        events = client.get(f"/v1/comparisons/{cid}/events").json()["events"]
    assert [(e["rule"], e["kind"], e["n_observations"]) for e in events] == [
        ("promote", "fired", 40)]
    # from the websocket, then from the stored events when the page opens again
    page.wait_for_function(f"() => ({EVENT_LABELS})().length === 1", timeout=10_000)
    assert page.evaluate(EVENT_LABELS) == [["promote fired", 40, True]]
    page.reload()
    page.wait_for_function(f"() => ({EVENT_LABELS})().length === 1", timeout=10_000)
    assert page.evaluate(EVENT_LABELS) == [["promote fired", 40, True]]
    assert console_errors == []


BOXES = """() => {
    const chart = document.getElementById('chart-bayes-factor');
    const box = (node) => { const r = node.getBoundingClientRect();
                            return [r.left, r.top, r.right, r.bottom]; };
    return {plot: box(chart.querySelector('.nsewdrag')),
            legend: box(chart.querySelector('.legend')), chart: box(chart)};
}"""
FRESH_CHARTS = """(count) => ['chart-ess', 'chart-annealing-steps', 'chart-update-time'].every(
  id => {
    const chart = document.getElementById(id);
    return chart.data && chart.data.every(trace => trace.x.length === count
        && trace.y.every(v => v !== null));
})"""


def test_the_headline_shows_log_bayes_factors_of_five_models(
    page: Page, console_errors: list[str], embedded_server: Server, artifacts: Path
) -> None:
    """SG-AIS on five models: the headline plots log Z_m − log Z_best per model with ±√(s_m² +
    s_best²) error bars, the best flat at 0, the legend below the plot; after a reload the
    diagnostics come back from GET /history (every point, not one), on a time axis from 0.
    The screenshot test-artifacts/dashboard.png shows it."""
    body = {"name": "five models", "seed": 0, "x_dim": 4, "models": FIVE_MODELS,
            "estimator": {"method": "sgais", "particles": 32}}
    x, y = regression_data(200, seed=11)
    with embedded_server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in chunks(x, y, 50):
            assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).is_success
        history = client.get(f"/v1/comparisons/{cid}/history").json()
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
    best = max(evidence["models"], key=lambda m: m["log_evidence"])["name"]
    page.goto(f"{embedded_server.url}/#{cid}")
    page.wait_for_function(HEADLINE_HAS_POINTS, arg=5, timeout=10_000)
    page.wait_for_function(FRESH_CHARTS, arg=4, timeout=10_000)  # from the stored trace alone
    traces = page.evaluate("""() => document.getElementById('chart-bayes-factor').data.map(
        t => ({name: t.name, x: t.x, y: t.y, error: t.error_y.array}))""")
    reference = history["models"][best]
    for trace in traces:
        name = trace["name"].split(" ")[0]
        series = history["models"][name]
        assert trace["x"] == series["n_observations"] == [50, 100, 150, 200]
        expected = [a - b for a, b in zip(series["log_evidence"], reference["log_evidence"],
                                          strict=True)]
        assert trace["y"] == pytest.approx(expected, abs=1e-9)
        if name == best:
            assert trace["name"] == f"{best} (current best)" and trace["y"] == [0, 0, 0, 0]
            continue
        combined = [math.hypot(a, b) for a, b in zip(series["log_evidence_stderr"],
                                                      reference["log_evidence_stderr"],
                                                      strict=True)]
        assert trace["error"] == pytest.approx(combined, abs=1e-9) and min(combined) > 0
    boxes = page.evaluate(BOXES)
    plot, legend = boxes["plot"], boxes["legend"]
    assert legend[1] >= plot[3] or legend[0] >= plot[2], f"the legend covers the plot: {boxes}"
    assert legend[3] <= boxes["chart"][3] + 1  # and it is not cut off
    time_axis = page.evaluate(
        "() => document.getElementById('chart-update-time')._fullLayout.yaxis.range")
    assert time_axis[0] >= 0
    assert [p["compute_seconds"] > 0 for p in history["points"]] == [True] * 4
    assert all(isinstance(v, int) and v > 0 for v in reference["annealing_steps"])

    screenshot = artifacts / "dashboard.png"
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"dashboard screenshot: {screenshot}")
    assert screenshot.stat().st_size > 10_000
    assert console_errors == []


def test_the_table_fits_800_px_and_an_empty_model_shows_a_dash(
    browser: Browser, console_errors: list[str], embedded_server: Server
) -> None:
    with embedded_server.client() as client:
        body = {"name": "narrow", "x_dim": 4, "models": FIVE_MODELS}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        client.post("/v1/comparisons", json={**comparison_body(), "name": "single",
                                             "models": FIVE_MODELS[:1]})
    context = browser.new_context(viewport={"width": 800, "height": 900})
    page = context.new_page()
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    try:
        page.goto(f"{embedded_server.url}/#{cid}")
        page.wait_for_selector("#evidence-table tbody tr")
        widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
            table: document.getElementById('evidence-table').getBoundingClientRect().right})""")
        assert widths["page"] <= 800 and widths["table"] <= 800, widths
        cells = page.locator("#evidence-table tr[data-model=right] td").all_inner_texts()
        assert cells[1:4] == ["—", "—", "—"]  # log Z ± stderr, log BF, log Z / n: no data yet
        listed = page.locator("#comparison-list a").all_inner_texts()
        assert listed[0].startswith("single") and "1 model ·" in listed[0]  # newest first
        assert listed[1].startswith("narrow") and "5 models ·" in listed[1]
    finally:
        context.close()
    assert console_errors == []


# Four models with 24-character names (one family name of 31), every column filled: log Z ±
# stderr, log BF ± stderr, ESS, annealing steps, an ELBO "(of 40 rows)" and a window log BF; a
# comparison name of 100 characters without a space.
LONG_NAMES = [
    {"name": "regression_with_inputs_1", "family": "linear_regression", "config": {"dim": 1}},
    {"name": "regression_with_inputs_2", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "regression_with_inputs_3", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "unknown_noise_regression", "family": "linear_regression_unknown_noise",
     "config": {"dim": 3}},
]
LONG_TITLE = "house_prices_by_region_" * 4 + "x" * 8
# [content width, box width] of the page, the comparison list, the main column, the table's box
WIDTHS = """() => {
    const box = (node) => [node.scrollWidth, node.clientWidth];
    return {page: [document.documentElement.scrollWidth, window.innerWidth],
            nav: box(document.querySelector('nav')), main: box(document.querySelector('main')),
            table: box(document.getElementById('evidence-table').parentElement)};
}"""


@contextlib.contextmanager
def _four_models_shown(browser: Browser, console_errors: list[str], url: str, width: int,
                       height: int) -> Iterator[Page]:
    """The dashboard at ``url`` in a ``width`` × ``height`` window once its four models have
    points; after the caller's checks, the page fits the window: nothing wider than its box."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    try:
        page.goto(url)
        page.wait_for_function(HEADLINE_HAS_POINTS, arg=4, timeout=10_000)
        yield page
        widths = page.evaluate(WIDTHS)
        print(f"[content, box] widths at {width} px: {widths}")
        assert widths["page"] == [width, width], widths
        assert all(content <= box for content, box in widths.values()), widths
    finally:
        context.close()


@pytest.mark.parametrize(("width", "height"), [(800, 600), (1024, 768)])
def test_long_names_fit_the_window_without_scrolling_sideways(
    browser: Browser, console_errors: list[str], embedded_server: Server, width: int, height: int
) -> None:
    """Nothing is wider than its box: not the page, the list, the main column, nor the table
    (which would scroll in its own box rather than the page's; it need not)."""
    body = {"name": LONG_TITLE, "x_dim": 4, "models": LONG_NAMES,
            "estimator": {"method": "sgais", "particles": 32}}
    x, y = regression_data(60, seed=5)
    with embedded_server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for rows in (slice(0, 40), slice(40, 60)):
            chunk = {"x": x[rows].tolist(), "y": y[rows].tolist()}
            assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).is_success
    with _four_models_shown(browser, console_errors, f"{embedded_server.url}/#{cid}", width,
                            height) as page:
        cells = page.locator("#evidence-table tbody td:nth-child(2)").all_inner_texts()
        assert len(cells) == 4 and "—" not in cells
        elbo = page.locator("#evidence-table tr[data-model=unknown_noise_regression] td.elbo")
        assert elbo.inner_text().endswith("(of 40 rows)")
    assert console_errors == []


# Four models by formula with 24-character names, formulas of up to 40 characters.
FORMULA_MODELS = [
    {"name": name, "family": "linear_regression", "formula": formula, "config": {}}
    for name, formula in (("regression_with_inputs_1", "target ~ a + b + c + d + a:b + a:c + b:d"),
                          ("regression_with_inputs_2", "target ~ a + b + c + a:b + a:c + b:c"),
                          ("regression_with_inputs_3", "target ~ a + b + d + a:b + a:d + b:d"),
                          ("regression_with_one_input", "target ~ a"))
]


@pytest.mark.parametrize(("width", "height"), [(800, 600), (1024, 768)])
def test_formulas_show_under_the_names_and_fit_the_window(
    browser: Browser, console_errors: list[str], embedded_server: Server, width: int, height: int
) -> None:
    body = {"name": "formulas", "models": FORMULA_MODELS, "estimator": {"method": "exact"}}
    x, y = regression_data(40, seed=6)
    columns = {**{name: x[:, j].tolist() for j, name in enumerate("abcd")}, "target": y.tolist()}
    with embedded_server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        applied = client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                              json={"columns": columns})
        assert applied.is_success, applied.text
    with _four_models_shown(browser, console_errors, f"{embedded_server.url}/#{cid}", width,
                            height) as page:
        shown = page.locator("#evidence-table td:first-child small.formula").all_inner_texts()
        assert shown == ["~ " + m["formula"].partition("~ ")[2] for m in FORMULA_MODELS]
    assert console_errors == []


def test_an_elbo_over_fewer_rows_is_marked(page: Page, console_errors: list[str],
                                           embedded_server: Server) -> None:
    """The ELBO is refreshed when a model's rows double: after 40 + 20 rows it covers 40, and
    the table says so rather than showing it beside a log Z of 60 rows as if comparable."""
    spec = {"name": "normal", "estimator": {"method": "exact"},
            "models": [{"name": "nig", "family": "linear_regression_unknown_noise",
                        "config": {"dim": 1}}]}
    x, y = regression_data(60, seed=15)
    with embedded_server.client() as client:
        cid = client.post("/v1/comparisons", json=spec).json()["id"]
        for start, stop in ((0, 40), (40, 60)):
            chunk = {"x": x[start:stop, :1].tolist(), "y": y[start:stop].tolist()}
            evidence = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).json()
    elbo = evidence["models"][0]["elbo"]
    page.goto(f"{embedded_server.url}/#{cid}")
    page.wait_for_selector("#evidence-table tbody tr")
    cell = page.locator("#evidence-table tr[data-model=nig] td.elbo")
    assert cell.inner_text() == f"{elbo:.2f} (of 40 rows)"
    assert page.locator("#elbo-note").is_visible()
    assert "compare it with log Z at k rows" in page.locator("#elbo-note").inner_text()
    assert console_errors == []


def test_catching_up_degraded_and_unreliable_states_are_spelled_out(
    page: Page, console_errors: list[str], embedded_server: Server
) -> None:
    """The websocket is answered by the test with the contract's shapes: a model lagging the
    comparison's rows, one whose moves diverged (service/reliability.py) and a degraded
    status."""
    server = embedded_server
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact")).json()["id"]
        snapshot = client.get(f"/v1/comparisons/{cid}/evidence").json()
    models = [{**m, "log_evidence": -61.5 - i, "log_evidence_stderr": 0.0, "n_observations": 40,
               "ess": 64.0, "posterior_probability": [0.9, 0.1, None][i], "elbo": None}
              for i, m in enumerate(snapshot["models"])]
    models[2].update(n_observations=20, catching_up=True)
    reason = "1 update(s) undid more than 10% of their SGHMC trajectories as diverged"
    models[1]["reliability"] = {"reliable": False, "reason": reason, "diverged_updates": 1,
                                "max_diverged_fraction": 0.9, "first_diverged_at": 40}
    degraded = {**snapshot, "version": 3, "sequence": 2, "n_observations": 40, "models": models,
                "status": "degraded", "status_reason": "chunk 2 was dead-lettered: bad rows"}

    def answer(socket: WebSocketRoute) -> None:
        socket.send(json.dumps({"type": "snapshot", "evidence": degraded}))

    page.route_web_socket(f"**/v1/comparisons/{cid}/ws", answer)
    page.goto(f"{server.url}/#{cid}")
    page.wait_for_selector("#evidence-table tbody tr")
    notices = _notices(page)
    assert "Degraded: chunk 2 was dead-lettered: bad rows" in notices
    assert any(n.startswith("Catching up: model wrong_noise has seen 20 of 40 rows")
               for n in notices)
    lagging = page.locator("#evidence-table tr[data-model=wrong_noise] td:last-child")
    assert lagging.inner_text() == "catching up 20/40"
    assert f"Model too_few unreliable: {reason}" in notices
    marked = page.locator("#evidence-table tr[data-model=too_few] td:last-child")
    assert marked.inner_text() == "current unreliable"
    assert page.locator("#evidence-table tr[data-model=right] td:last-child").inner_text() == (
        "current")
    assert console_errors == []


def test_an_unknown_comparison_is_reported(page: Page, embedded_server: Server) -> None:
    page.goto(f"{embedded_server.url}/#no-such-id")
    page.wait_for_selector("#notices .notice")
    assert "No comparison with id no-such-id." in _notices(page)


def test_the_page_asks_for_a_key_and_then_uses_it(page: Page,
                                                  start_server: StartServer) -> None:
    """With API keys configured the page is public, the data is not: it says so, and once the
    key is typed in, the list, the history and the websocket (``?token=``) work."""
    server = start_server("embedded", api_keys={"k-ui": {"read": ["*"], "write": ["*"]}})
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("exact"),
                          headers={"Authorization": "Bearer k-ui"}).json()["id"]
    page.goto(f"{server.url}/#{cid}")
    page.wait_for_selector("#notices .notice")
    assert "This server needs an API key: enter it at the top right." in _notices(page)
    page.fill("#api-key", "k-ui")
    page.press("#api-key", "Enter")
    page.wait_for_selector("#evidence-table tbody tr")
    page.wait_for_function("() => document.getElementById('connection').textContent === 'live'")
    assert page.locator("#comparison-list a").count() == 1
    assert not any("API key" in text for text in _notices(page))
