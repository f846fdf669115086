"""The columns a command sends, read from a CSV (with a header row) or Parquet file as float64:
inputs, and a target whose text labels are numbered as classes. Every problem names the column,
the data row (counting from 1, the header not counted) and the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from modelcompare.service.api.ingest import MAX_ABS_VALUE
from modelcompare.service.cli.errors import CliError


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
    """The named columns. The target is read as class labels when ``labels`` gives their order
    or when it holds text that is not all numbers (then the labels are numbered in sorted
    order)."""
    table = read_table(path)
    wanted = [*x_cols, *([] if y_col is None else [y_col])]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise CliError(f"{path.name} has no column {', '.join(map(repr, missing))}; its columns "
                       f"are: {', '.join(table.column_names)}")
    x = np.column_stack([_numbers(table, c, path) for c in x_cols]) if x_cols else None
    if y_col is None:
        return FileData(x, None, None)
    if labels is None:
        numbers = _maybe_numbers(table[y_col].to_pylist()) if _is_text(table[y_col]) else \
            _numbers(table, y_col, path)
        if numbers is not None:
            return FileData(x, _checked(numbers, y_col, path), None)
    y, order = _classes(table[y_col].to_pylist(), y_col, path, labels)
    return FileData(x, y, order)


def _is_text(column: Any) -> bool:
    import pyarrow as pa

    kind = column.type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or \
        pa.types.is_dictionary(kind)


def _maybe_numbers(values: list[Any]) -> np.ndarray | None:
    try:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _numbers(table: Any, column: str, path: Path) -> np.ndarray:
    values = table[column]
    try:
        numbers = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    except (TypeError, ValueError):
        for row, value in enumerate(values.to_pylist(), start=1):
            if value is not None and _maybe_numbers([value]) is None:
                raise CliError(f"column {column!r} of {path.name} is not numeric: data row "
                               f"{row} holds {value!r}") from None
        numbers = np.asarray(_maybe_numbers(values.to_pylist()))
    return _checked(numbers, column, path)


def _checked(numbers: np.ndarray, column: str, path: Path) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(numbers))
    if bad.size:
        raise CliError(f"column {column!r} of {path.name} has {bad.size} missing or non-finite "
                       f"values (first at data row {bad[0] + 1}: {numbers[bad[0]]})")
    huge = np.flatnonzero(np.abs(numbers) > MAX_ABS_VALUE)
    if huge.size:
        raise CliError(f"column {column!r} of {path.name} has values beyond ±{MAX_ABS_VALUE:g}, "
                       f"which the server refuses (first at data row {huge[0] + 1}: "
                       f"{numbers[huge[0]]:g})")
    return np.array(numbers, dtype=np.float64)  # a writable copy (torch reads it)


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
