"""Markdown tables of ``paper.py``'s results, as pasted into ``benchmarks/README.md``.

    python benchmarks/paper_report.py [--results benchmarks/results]

Reads ``paper_<model>.json`` and prints one table per model: rows N, a column per method. A cell
is ``log Ẑ − reference`` in nats ± the method's reported stderr and its CPU seconds; the reference
column's own cell is its time only. Where no reference finished at N the cells read log Ẑ / N ±
stderr (nats). Not-run cells say why: extrapolated time, killed at the wall limit, or not run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from paper import best_reference, killed, point_at

ORDER = ("exact", "sgais", "hybrid", "sequential", "ais", "nested", "dynesty", "laplace_is")


def seconds(value: float) -> str:
    return f"{value:.3g} s"


def cell(point: dict | None, reference: tuple[str, dict] | None, method: str) -> str:
    if point is None:
        return "—"
    if "log_z" not in point:
        if killed(point):
            return f"killed, ≥ {seconds(point['seconds'])}"
        if point.get("status") == "extrapolated":
            return f"extrapolated: {seconds(point['seconds'])}"
        return point.get("status", "?")
    spent = seconds(point["seconds"])
    if reference is None:
        return f"{point['log_z'] / point['n']:.5f} ± {point['stderr']:.2f}; {spent}"
    if method == reference[0]:
        return spent
    difference = point["log_z"] - reference[1]["log_z"]
    return f"{difference:+.2f} ± {point['stderr']:.2f}; {spent}"


def model_table(payload: dict) -> str:
    name, results = payload["model"], payload["results"]
    methods = [m for m in ORDER if m in results]
    lines = [
        f"**{name}**",
        "",
        "| N | reference: log Z / N | " + " | ".join(methods) + " |",
        "| --- " * (len(methods) + 2) + "|",
    ]
    for n in payload["grid"]:
        reference = best_reference(results, n, name)
        head = "none" if reference is None else (
            f"{reference[1]['log_z'] / n:.5f} ({reference[0]})"
        )
        cells = [cell(point_at(results[m], n), reference, m) for m in methods]
        lines.append(f"| {n:,} | {head} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    for name in ("linear", "logistic", "mixture"):
        path = args.results / f"paper_{name}.json"
        if path.exists():
            print(model_table(json.loads(path.read_text())), end="\n\n")


if __name__ == "__main__":
    main()
