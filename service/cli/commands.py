"""``modelcompare create | add-model | remove-model | list | delete | predict``: client commands
that print (``watch``: service/cli/watch.py)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

import numpy as np

from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import existing, read_data
from modelcompare.service.cli.parser import LIST_PAGE
from modelcompare.service.cli.tables import comparison_lines
from modelcompare.service.client import PREDICTION_FIELDS, Client


def create(args: argparse.Namespace) -> None:
    """POST the spec; the new id alone on stdout (``ID=$(modelcompare create spec.yaml)``)."""
    from rich.console import Console

    spec = _mapping(args.spec, "one mapping (name, models, estimator, seed)")
    with Client(args.url, args.api_key) as api:
        created = api.create_comparison(spec)
    names = ", ".join(m["name"] for m in created["models"])
    count = len(created["models"])
    Console(stderr=True).print(f"created comparison [bold]{created['name']}[/bold] with "
                               f"{count} model{'' if count == 1 else 's'} ({names})")
    print(created["id"])


def add_model(args: argparse.Namespace) -> None:
    """POST one model's spec to a comparison; says whether it replays the stored rows."""
    spec = _mapping(args.spec,
                    "one model (name, family, config, columns or formula, prior_probability)")
    with Client(args.url, args.api_key) as api:
        added = api.add_model(args.comparison, spec)
    rows = added["evidence"]["n_observations"]
    _note(f"added model {added['model']!r} to {args.comparison}"
          + (f": it replays the {rows} rows stored before it joins" if added["catching_up"]
             else ""))


def remove_model(args: argparse.Namespace) -> None:
    with Client(args.url, args.api_key) as api:
        removed = api.remove_model(args.comparison, args.model)
    left = ", ".join(m["name"] for m in removed["evidence"]["models"])
    _note(f"removed model {removed['model']!r} from {args.comparison}; left: {left}")


def _mapping(file: str, what: str) -> dict[str, Any]:
    """The mapping a YAML or JSON file holds."""
    import yaml

    path = existing(file)
    try:
        spec = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(
            path.read_text())
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(f"{path} is not valid {path.suffix.lstrip('.').upper()}: {exc}") from None
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold {what}")
    return spec


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def families(args: argparse.Namespace) -> None:
    """The server's families, one line each; plugins it could not load on stderr."""
    with Client(args.url, args.api_key) as api:
        listed = api.families()
    for family in listed["families"]:
        print(f"{family['family']}  {family['package']} {family['version']}  "
              f"{family['description']}")
    for name, why in listed["unavailable"].items():
        _note(f"{name}: unavailable: {why}")


def list_comparisons(args: argparse.Namespace) -> None:
    """One line per comparison, newest first, printed page by page as they arrive."""
    shown = 0
    with Client(args.url, args.api_key) as api:
        page_size = LIST_PAGE if args.limit is None else min(LIST_PAGE, args.limit)
        for comparison in api.iter_comparisons(page_size):
            if args.limit is not None and shown >= args.limit:
                break
            for line in comparison_lines([comparison]):
                print(line)
            shown += 1


def delete(args: argparse.Namespace) -> None:
    with Client(args.url, args.api_key) as api:
        for cid in args.comparisons:
            name = api.get_comparison(cid)["name"]
            api.delete_comparison(cid)
            _note(f"deleted comparison {name!r} ({cid})")


def predict(args: argparse.Namespace) -> None:
    """The model-averaged predictive at the given rows, as CSV on stdout (``--json``: the API's
    reply): one line per row, the mixture's fields, then each model's as ``model:field``."""
    with Client(args.url, args.api_key) as api:
        reply = api.predict(args.comparison, _query_rows(api, args))
    if args.json:
        print(json.dumps(reply, indent=2, default=lambda a: a.tolist()))
        return
    parts = [("", reply["mixture"])] + [(f"{m['name']}:", m) for m in reply["models"]]
    header, columns = ["row"], []
    for prefix, part in parts:
        for field in PREDICTION_FIELDS:
            values = None if part is None else part.get(field)
            if values is None:
                continue
            values = np.asarray(values, dtype=np.float64)
            if values.ndim == 2:  # class probabilities: one column per class
                header += [f"{prefix}p{k}" for k in range(values.shape[1])]
                columns += list(values.T)
            else:
                header.append(f"{prefix}{field}")
                columns.append(values)
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(header)
    for row, values in enumerate(zip(*columns, strict=True)):
        writer.writerow([row, *(f"{v:.10g}" for v in values)])


def _query_rows(api: Client, args: argparse.Namespace) -> Any:
    """The rows to predict at: a file's columns (those a comparison by formula names, or
    --x-cols) as a table or matrix, the --x rows, or None (one predictive row of a comparison
    whose models read no x)."""
    if args.file is not None and args.x:
        raise CliError("give the rows either in a file or with --x, not both")
    if args.file is not None:
        return _file_rows(api, args)
    if not args.x:
        return None
    try:
        rows = [[float(v) for v in row.split(",")] for row in args.x]
    except ValueError as exc:
        raise CliError(f"--x takes comma-separated numbers, one row each: {exc}") from None
    if len({len(r) for r in rows}) != 1:
        raise CliError("every --x row needs the same number of values")
    return np.array(rows, dtype=np.float64)


def _file_rows(api: Client, args: argparse.Namespace) -> Any:
    # Here: formulaic, pandas and torch, which the other commands do without.
    from modelcompare.service.cli.checks import comparison_spec
    from modelcompare.service.cli.named import read_named, takes_names

    path = existing(args.file)
    x_cols = [c for item in args.x_cols or [] for c in item.split(",") if c]
    spec = comparison_spec(api.get_comparison(args.comparison))
    if spec.variables is not None:
        if x_cols:
            raise CliError(takes_names(spec, "--x-cols"))
        rows: Any = read_named(path, spec, target=False).table
    else:
        if not x_cols:
            raise CliError("name the input columns of the file with --x-cols")
        rows = read_data(path, x_cols, None).x
    if len(rows) == 0:
        raise CliError(f"{args.file} has no data rows (only a header)")
    return rows
