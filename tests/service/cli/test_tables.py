"""The evidence table keeps every model's name whole in a narrow terminal: the other columns
give way, so two names that begin alike never print as the same prefix."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from modelcompare.service.cli.tables import evidence_table

NAMES = ("student_t", "student_t_1col", "linear_regression_with_a_long_name")


def _evidence() -> dict[str, Any]:
    """Three models, one with an ELBO and one catching up: the widest table there is."""
    models = [{"name": name, "log_evidence": -1234.5678, "log_evidence_stderr": 0.51,
               "n_observations": 4000, "posterior_probability": probability, "ess": 60.0,
               "catching_up": name == "student_t_1col",
               "elbo": -1300.25 if name == "student_t" else None, "elbo_n_observations": 3000,
               "reliability": {"reliable": True, "reason": None}}
              for name, probability in zip(NAMES, (0.5, 0.3, 0.2), strict=True)]
    return {"n_observations": 4000, "sequence": 8, "version": 9, "status": "ok",
            "models": models}


@pytest.mark.parametrize("width", [80, 60, 40])  # at 40 nothing but the names fits
def test_names_print_whole_and_distinct(width: int) -> None:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(evidence_table(_evidence()))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width
    body = lines[lines.index(next(line for line in lines if line.startswith("┡"))) + 1:]
    first_cells = [line.split("│")[1].strip() for line in body if line.startswith("│")]
    names = [cell for cell in first_cells if cell]  # a row's later lines leave it empty
    assert names == list(NAMES)
