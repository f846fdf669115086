"""Files for comparisons by formula: the comparison's ``variables`` (and ``target_column``) read
from a CSV or Parquet file by name and checked as the server checks them, before anything is
sent: present, numeric (text only where a formula declares the levels), within the declared
levels, and the server's own check of the design rows. The result is the Arrow table the
commands send, and the columns as ``ChunkKeys`` hashes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import (
    is_text,
    numbers,
    read_table,
    read_target,
    require_columns,
)
from modelcompare.service.formula import NamedDataError, compile_formula, design_rows
from modelcompare.service.records import ComparisonSpec


class NamedFile(NamedTuple):
    table: pa.Table  # the inputs in the comparison's order, then the target as numbers
    inputs: list[np.ndarray]  # the inputs as keys hash them: float64, or text (object arrays)
    y: np.ndarray | None  # the target as numbers
    labels: list[str] | None  # class k of y is labels[k], when the target column held text

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


def inputs_of(spec: ComparisonSpec) -> list[str]:
    """The raw input columns of a comparison by formula, its target aside."""
    assert spec.variables is not None
    return [v for v in spec.variables if v != spec.target_column]


def takes_names(spec: ComparisonSpec, option: str) -> str:
    """Why ``option`` does not apply to a comparison by formula."""
    target = f"; target {spec.target_column}" if spec.target_column else ""
    return (f"comparison {spec.name!r} names its columns in its formulas (inputs "
            f"{', '.join(inputs_of(spec)) or 'none'}{target}): leave out {option}")


def read_named(path: Path, spec: ComparisonSpec, target: bool,
               labels: list[str] | None = None) -> NamedFile:
    """The comparison's columns of the file (``target``: its target too, read as ``read_target``
    reads it), checked; ``CliError`` with one line naming the column, data row and value."""
    table = read_table(path)
    target_column = spec.target_column if target else None
    names = inputs_of(spec)
    require_columns(table, [*names, *([target_column] if target_column else [])], path,
                    f", which comparison {spec.name!r} reads by name")
    levels = declared_levels(spec)
    columns: dict[str, Any] = {}
    for name in names:
        if name in levels:  # sent as the file holds it: text or numbers
            _check_levels(table, name, levels[name], path)
            columns[name] = table[name]
        else:
            columns[name] = numbers(table, name, path)
    y, order = (None, None) if target_column is None else \
        read_target(table, target_column, path, labels)
    if target_column is not None:
        columns[target_column] = y
    sent = pa.table(columns)
    if sent.num_rows:  # no rows: the caller says so
        _check_design(spec, sent, path, target_column is not None)
    inputs = [_hashed(sent[name]) if name in levels else columns[name] for name in names]
    return NamedFile(sent, inputs, y, order)


def declared_levels(spec: ComparisonSpec) -> dict[str, list[Any]]:
    """Each categorical input's declared levels (a comparison's formulas declare the same)."""
    return {name: list(levels) for model in spec.models if model.formula is not None
            for name, levels in compile_formula(model.formula).levels.items()}


def _check_levels(table: pa.Table, name: str, levels: list[Any], path: Path) -> None:
    values = table[name].to_pylist()
    row = next((r for r, value in enumerate(values) if value not in levels), None)
    if row is not None:
        raise CliError(f"column {name!r} of {path.name}: data row {row + 1} holds "
                       f"{values[row]!r}, which is not one of the levels its formula declares "
                       f"({', '.join(map(repr, levels))})")


def _check_design(spec: ComparisonSpec, table: pa.Table, path: Path, target: bool) -> None:
    """The server's own check of rows by name (``design_rows``: every design value finite
    within bounds, among others), on the whole file."""
    try:
        design_rows(spec, table, target=target)
    except NamedDataError as exc:
        row = exc.details["row"]
        where = "" if row is None else f" (data row {row + 1})"
        raise CliError(f"{path.name}: {exc}{where}") from None


def _hashed(column: pa.ChunkedArray) -> np.ndarray:
    """A categorical input as the keys hash it: its text, or its numbers as float64."""
    if is_text(column):
        return np.array(column.to_pylist(), dtype=object)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
