"""The columns a command sends, read from a CSV (with a header row) or Parquet file as float64:
inputs, and a target whose text labels are numbered as classes (``named`` reads the columns of
a comparison by formula with these). Every problem names the column, the data row (counting
from 1, the header not counted) and the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from modelcompare.service.cli.errors import CliError
from modelcompare.service.records import MAX_ABS_VALUE


class FileData(NamedTuple):
    x: np.ndarray | None  # rows × inputs, in the order of the named columns
    y: np.ndarray | None
    labels: list[str] | None  # class k of y is labels[k], when the target column held text

    @property
    def rows(self) -> int:
        reference = self.x if self.x is not None else self.y
        return 0 if reference is None else len(reference)


def existing(name: str) -> Path:
    path = Path(name)
    if not path.is_file():
        raise CliError(f"no such file: {name}")
    return path


def read_table(path: Path) -> Any:
    """The whole file as a pyarrow table."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    try:
        if path.suffix.lower() == ".csv":
            return pyarrow.csv.read_csv(path)
        if path.suffix.lower() in (".parquet", ".pq"):
            return pyarrow.parquet.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    raise CliError(f"{path}: expected a .csv or .parquet file")


def read_data(path: Path, x_cols: list[str], y_col: str | None,
              labels: list[str] | None = None) -> FileData:
    """The named columns; the target as ``read_target`` reads it."""
    table = read_table(path)
    require_columns(table, [*x_cols, *([] if y_col is None else [y_col])], path)
    x = np.column_stack([numbers(table, c, path) for c in x_cols]) if x_cols else None
    if y_col is None:
        return FileData(x, None, None)
    return FileData(x, *read_target(table, y_col, path, labels))


def require_columns(table: Any, wanted: list[str], path: Path, reader: str = "") -> None:
    """``CliError`` naming the first of ``wanted`` the file lacks (and who reads it: ``reader``)
    and the columns it has."""
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise CliError(f"{path.name} has no column {', '.join(map(repr, missing))}{reader}; its "
                       f"columns are: {', '.join(table.column_names)}")


def read_target(table: Any, column: str, path: Path,
                labels: list[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """The target as numbers, with its labels in class order when it holds class labels: when
    ``labels`` gives their order, or when it holds text that is not all numbers (then they are
    numbered in sorted order)."""
    if labels is None:
        values = _maybe_numbers(table[column].to_pylist()) if is_text(table[column]) else \
            numbers(table, column, path)
        if values is not None:
            return checked(values, column, path), None
    return _classes(table[column].to_pylist(), column, path, labels)


def is_text(column: Any) -> bool:
    import pyarrow as pa

    kind = column.type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or \
        pa.types.is_dictionary(kind)


def _maybe_numbers(values: list[Any]) -> np.ndarray | None:
    try:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def numbers(table: Any, column: str, path: Path) -> np.ndarray:
    """A numeric column as float64; ``CliError`` naming the first row that is not a finite
    number within the server's bounds."""
    cells = table[column]
    try:
        floats = np.asarray(cells.to_numpy(zero_copy_only=False), dtype=np.float64)
    except (TypeError, ValueError):
        for row, value in enumerate(cells.to_pylist(), start=1):
            if value is not None and _maybe_numbers([value]) is None:
                raise CliError(f"column {column!r} of {path.name} is not numeric: data row "
                               f"{row} holds {value!r}") from None
        floats = np.asarray(_maybe_numbers(cells.to_pylist()))
    return checked(floats, column, path)


def checked(values: np.ndarray, column: str, path: Path) -> np.ndarray:
    """``values`` as a writable float64 copy; ``CliError`` for a missing or non-finite value, or
    one beyond the server's bounds."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise CliError(f"column {column!r} of {path.name} has {bad.size} missing or non-finite "
                       f"values (first at data row {bad[0] + 1}: {values[bad[0]]})")
    huge = np.flatnonzero(np.abs(values) > MAX_ABS_VALUE)
    if huge.size:
        raise CliError(f"column {column!r} of {path.name} has values beyond ±{MAX_ABS_VALUE:g}, "
                       f"which the server refuses (first at data row {huge[0] + 1}: "
                       f"{values[huge[0]]:g})")
    return np.array(values, dtype=np.float64)  # a writable copy (torch reads it)


def _classes(values: list[Any], column: str, path: Path,
             labels: list[str] | None) -> tuple[np.ndarray, list[str]]:
    """Class numbers 0, 1, … of the labels, in the order of ``labels`` or sorted."""
    text = [None if v is None else str(v) for v in values]
    if None in text:
        raise CliError(f"column {column!r} of {path.name} has a missing label at data row "
                       f"{text.index(None) + 1}")
    order = labels or sorted(set(text))  # type: ignore[arg-type]
    number = {label: k for k, label in enumerate(order)}
    for row, label in enumerate(text, start=1):
        if label not in number:
            raise CliError(f"column {column!r} of {path.name}: data row {row} holds {label!r}, "
                           f"which is not one of --labels ({', '.join(order)})")
    return np.array([number[label] for label in text], dtype=np.float64), list(order)
