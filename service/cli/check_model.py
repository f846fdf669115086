"""``modelcompare check-model module:Class``: a model class of your own against the model
contract, one line per check (models/conformance). Exit status 0 when nothing failed, 1 when a
check failed, 2 for a bad argument (a path that does not import, a config that is not a JSON
object, a data file that cannot be read)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, NoReturn

from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import existing, read_data

BAD_ARGUMENT = 2


def run(args: argparse.Namespace) -> None:
    model_class = load_class(args.target)
    config = parse_config(args.config)
    rows = read_rows(args) if args.data else None
    import torch

    from modelcompare.models.conformance import Outcome, check_model

    # The checks' tensors are a worker's size (tens of particles, 64 rows): one thread, as a
    # worker runs, is several times faster than torch's default on a busy machine.
    torch.set_num_threads(1)
    findings = check_model(model_class, config, rows, args.seed)
    for finding in findings:
        print(f"{finding.outcome:<4}  {finding.check}: {finding.message}")
    failed = [f.check for f in findings if f.outcome is Outcome.FAIL]
    passed = sum(f.outcome is Outcome.PASS for f in findings)
    skipped = len(findings) - passed - len(failed)
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    if failed:
        sys.exit(1)


def refuse(message: str) -> NoReturn:
    print(f"modelcompare check-model: error: {message}", file=sys.stderr)
    sys.exit(BAD_ARGUMENT)


def load_class(target: str) -> type:
    """The class ``module:Class`` names, the module imported as ``python -m`` would (the current
    folder first on the path)."""
    module_name, colon, class_name = target.partition(":")
    if not colon or not module_name or not class_name:
        refuse(f"{target!r} is not MODULE:CLASS "
               "(e.g. modelcompare_example_models:StudentTRegression)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises while importing, reported in one line
        refuse(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}")
    found = getattr(module, class_name, None)
    if not isinstance(found, type):
        refuse(f"{module_name!r} has no class {class_name!r}")
    return found


def parse_config(text: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except ValueError as exc:
        refuse(f"--config is not JSON: {exc}")
    if not isinstance(config, dict):
        refuse(f"--config must be a JSON object of keyword arguments, got {text!r}")
    return config


def read_rows(args: argparse.Namespace) -> Any:
    """The file's columns as the checks' rows (estimators' ``Rows``)."""
    import torch

    from modelcompare.estimators.data.history import Rows

    try:
        data = read_data(existing(args.data), args.x_cols, args.y_col)
    except CliError as exc:
        refuse(str(exc))
    return Rows(*(None if a is None else torch.as_tensor(a, dtype=torch.float64)
                  for a in (data.x, data.y)))
