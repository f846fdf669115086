"""``modelcompare demo``: the whole loop on one machine, with a known right answer.

Data: y = 1.0·x₀ − 0.7·x₁ + 0.5·x₂ + 0.3 + N(0, 1), with a fourth, useless input x₃. Four linear
regressions compete: the right inputs, too few inputs, a wrong noise level, and one useless
extra input (Occam's razor should make it lose, narrowly). The same stream also feeds an
``exact`` comparison, so the table shows the closed-form log evidence next to SG-AIS.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from modelcompare.service.api.main import create_app
from modelcompare.service.client import Client
from modelcompare.service.core.config import Settings

WEIGHTS = np.array([1.0, -0.7, 0.5])
MODELS = [
    {"name": "right_inputs", "family": "linear_regression", "config": {"dim": 3}},
    {"name": "too_few_inputs", "family": "linear_regression", "config": {"dim": 2}},
    {"name": "wrong_noise", "family": "linear_regression", "config": {"dim": 3, "noise_std": 2.0}},
    {"name": "extra_useless_input", "family": "linear_regression", "config": {"dim": 4}},
]


def _data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4))
    return x, x[:, :3] @ WEIGHTS + 0.3 + rng.normal(size=rows)


def _table(evidence: dict[str, Any], exact: dict[str, Any]) -> Table:
    table = Table(title=f"after {evidence['n_observations']} rows (version {evidence['version']})")
    for column in ("model", "log Z (SG-AIS)", "± stderr", "log Z (exact)", "P(model | data)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    exact_by_name = {m["name"]: m["log_evidence"] for m in exact["models"]}
    best = max(evidence["models"], key=lambda m: m["posterior_probability"] or 0.0)["name"]
    for m in evidence["models"]:
        style = "bold green" if m["name"] == best else ""
        table.add_row(m["name"], f"{m['log_evidence']:.2f}", f"{m['log_evidence_stderr']:.2f}",
                      f"{exact_by_name[m['name']]:.2f}", f"{m['posterior_probability']:.4f}",
                      style=style)
    return table


def _summary(evidence: dict[str, Any], exact: dict[str, Any], seconds: float) -> str:
    ranked = sorted(evidence["models"], key=lambda m: m["log_evidence"], reverse=True)
    winner, second = ranked[0], ranked[1]
    factor = winner["log_evidence"] - second["log_evidence"]
    stderr = (winner["log_evidence_stderr"] ** 2 + second["log_evidence_stderr"] ** 2) ** 0.5
    exact_ranked = sorted(exact["models"], key=lambda m: m["log_evidence"], reverse=True)
    agrees = "agrees" if exact_ranked[0]["name"] == winner["name"] else "DISAGREES"
    return (
        f"[bold]Winner: {winner['name']}[/bold] with posterior probability "
        f"{winner['posterior_probability']:.4f} after {evidence['n_observations']} rows "
        f"in {seconds:.1f} s.\n"
        f"log Bayes factor over the runner-up ({second['name']}): {factor:.2f} ± {stderr:.2f} "
        f"(odds about e^{factor:.1f}).\n"
        f"The exact (closed-form) evidence {agrees}: its winner is {exact_ranked[0]['name']}, "
        f"by {exact_ranked[0]['log_evidence'] - exact_ranked[1]['log_evidence']:.2f} nats."
    )


def run_demo(rows: int, chunk: int, particles: int, seed: int, data_dir: str | None) -> None:
    console = Console()
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(redis_url=None, data_dir=Path(data_dir or scratch), port=0)
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=0,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            if not thread.is_alive():  # the app did not start; uvicorn logged why
                raise RuntimeError("the demo's server did not start")
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            with Client(f"http://127.0.0.1:{port}") as api:
                _stream(api, console, rows, chunk, particles, seed)
        finally:
            server.should_exit = True
            thread.join(timeout=30)


def _stream(api: Client, console: Console, rows: int, chunk: int, particles: int,
            seed: int) -> None:
    console.print(f"[bold]modelcompare demo[/bold]: {len(MODELS)} models, {rows} rows in chunks "
                  f"of {chunk}, SG-AIS with {particles} particles per model")
    created = {}
    for method, settings in (("sgais", {"particles": particles}), ("exact", {})):
        body = {"name": f"demo-{method}", "seed": seed, "models": MODELS, "x_dim": 4,
                "estimator": {"method": method, **settings}}
        created[method] = api.create_comparison(body)["id"]
    x, y = _data(rows, seed)
    progress = Progress(TextColumn("streaming"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("rows"), TimeElapsedColumn())
    task = progress.add_task("rows", total=rows)
    started = time.perf_counter()
    evidence: dict[str, Any] = {}
    exact: dict[str, Any] = {}
    with Live(Group(progress), console=console, refresh_per_second=8) as live:
        for start in range(0, rows, chunk):
            rows_x, rows_y = x[start : start + chunk], y[start : start + chunk]
            evidence, exact = (_applied(api, created[method], api.ingest(
                created[method], rows_x, rows_y, wait=True, idempotency_key=f"demo-{start}"))
                               for method in ("sgais", "exact"))
            progress.update(task, completed=min(start + chunk, rows))
            live.update(Group(progress, _table(evidence, exact)))
    console.print()
    console.print(_summary(evidence, exact, time.perf_counter() - started))


def _applied(api: Client, cid: str, reply: dict[str, Any]) -> dict[str, Any]:
    """The evidence once the chunk of ``reply`` is applied: the ``?wait=true`` reply itself, or
    (when the server's wait timed out first, on a busy machine) polled."""
    if reply.get("processed", True):
        return reply
    while (evidence := api.evidence(cid))["sequence"] < reply["sequence"]:
        time.sleep(0.2)
    return evidence
