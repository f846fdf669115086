"""Conformance checks for a model of your own: run them before comparing or deploying it.

``check_model(MyModel, {"dim": 2})`` builds the model from its config and runs every check in
order, each giving a ``Finding``: PASS, FAIL with what is wrong and how to fix it, or SKIP with
why (a check whose prerequisites failed is skipped). ``modelcompare check-model module:Class``
prints them; docs/guide/writing-models.md explains the contract they check.

The checks read 64 rows: the caller's, or rows drawn with the model's own predict
(``data.synthetic_rows``). Every draw comes from a generator derived from ``seed`` and the
check's name, so a report is reproducible and one check's draws do not depend on another's.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from typing import Any

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.models.conformance.contract import (
    build,
    check_attributes,
    check_config_round_trip,
    check_likelihood_shapes,
    check_predict,
    check_prior_shapes,
)
from modelcompare.models.conformance.data import given_rows, synthetic_rows
from modelcompare.models.conformance.evidence import check_evidence, check_state_round_trip
from modelcompare.models.conformance.findings import (
    FALSE_ALARM_RATE,
    Finding,
    Outcome,
    Skipped,
    Violation,
    critical_z,
)
from modelcompare.models.conformance.gradients import (
    check_grad_log_likelihood,
    check_grad_log_prior,
    check_row_gradients,
)
from modelcompare.models.conformance.prior import check_prior_draws, check_prior_normalised
from modelcompare.models.conformance.weighted_sums import check_weighted_sums

ROWS = 64  # rows the checks read: the streaming checks take them as two chunks of 32


def check_model(
    model_class: type,
    config: Mapping[str, Any] | None = None,
    rows: Rows | None = None,
    seed: int = 0,
) -> list[Finding]:
    """Every check of ``model_class(**config)``, on ``rows`` (or synthetic rows), in order."""
    try:
        model = build(model_class, dict(config or {}))
    except Violation as exc:
        return [Finding("construction", Outcome.FAIL, str(exc))]
    data: dict[str, Rows] = {}

    def read_rows() -> str:
        found, description = (given_rows(model, rows, ROWS) if rows is not None
                              else synthetic_rows(model, ROWS, draws("data")))
        data["rows"] = found
        return description

    def draws(check: str) -> Any:
        return derive_generator(seed, "check-model", check)

    checks: list[tuple[str, tuple[str, ...], Callable[[], str]]] = [
        ("construction", (), lambda: check_attributes(model)),
        ("config round trip", ("construction",), lambda: check_config_round_trip(model)),
        ("prior shapes", ("construction",), lambda: check_prior_shapes(model, seed)),
        ("grad_log_prior", ("prior shapes",),
         lambda: check_grad_log_prior(model, draws("grad_log_prior"))),
        ("prior draws match log_prior", ("prior shapes",),
         lambda: check_prior_draws(model, draws("prior draws"))),
        ("log_prior is normalised", ("prior draws match log_prior",),
         lambda: check_prior_normalised(model, draws("normalised"))),
        ("data", ("prior shapes",), read_rows),
        ("likelihood shapes", ("data",),
         lambda: check_likelihood_shapes(model, data["rows"], draws("likelihood shapes"))),
        ("likelihood gradients", ("likelihood shapes",),
         lambda: check_grad_log_likelihood(model, data["rows"], draws("likelihood gradients"))),
        ("row gradients", ("likelihood shapes",),
         lambda: check_row_gradients(model, data["rows"], draws("row gradients"))),
        ("weighted sums", ("likelihood shapes",),
         lambda: check_weighted_sums(model, data["rows"], draws("weighted sums"))),
        ("predict", ("data",), lambda: check_predict(model, data["rows"], draws("predict"))),
        ("state save/load", ("likelihood shapes", "config round trip"),
         lambda: check_state_round_trip(model, data["rows"], seed)),
        ("evidence", ("likelihood shapes",),
         lambda: check_evidence(model, data["rows"], draws("evidence"), seed)),
    ]
    findings: dict[str, Finding] = {}
    for name, needs, body in checks:
        failed = [need for need in needs if findings[need].outcome is not Outcome.PASS]
        if failed:
            findings[name] = Finding(name, Outcome.SKIP, f"needs {', '.join(failed)} to pass")
        else:
            findings[name] = run(name, body)
    return list(findings.values())


def run(name: str, body: Callable[[], str]) -> Finding:
    """The check's finding; an exception the model raised is a failure that says where."""
    try:
        return Finding(name, Outcome.PASS, body())
    except Violation as exc:
        return Finding(name, Outcome.FAIL, str(exc))
    except Skipped as exc:
        return Finding(name, Outcome.SKIP, str(exc))
    except Exception as exc:  # the model's own code failed: report it, go on with the others
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return Finding(name, Outcome.FAIL, f"raised {type(exc).__name__}: {exc} (at "
                       f"{frame.filename}:{frame.lineno}, in {frame.name})")


__all__ = ["FALSE_ALARM_RATE", "ROWS", "Finding", "Outcome", "check_model", "critical_z"]
