"""Rows by name, for comparisons whose models read named columns (``spec.design`` set): a body
in one of the named forms becomes a pyarrow Table of the columns the comparison reads, and that
table its design rows (``modelcompare.service.formula.design_rows``).

Forms: JSON ``{"columns": {name: [values]}}`` or ``{"records": [{name: value}, …]}``; CSV with a
header row; Parquet; an Arrow IPC stream. Only the columns the comparison reads are built.
Rows are counted before the table is built where the format allows: Parquet's metadata, the
Arrow stream's batches (views of the body), CSV's line breaks (an upper bound: the exact count
follows the read)."""

from __future__ import annotations

import email.message
import io
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from modelcompare.service.api.errors import ApiError
from modelcompare.service.api.inflight import RESERVATION
from modelcompare.service.formula import NamedDataError, design_rows
from modelcompare.service.schemas import STRICT_JSON, ComparisonSpec

JSON = "application/json"
CSV = "text/csv"
PARQUET = "application/vnd.apache.parquet"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
CHUNK_MEDIA_TYPES = (CSV, PARQUET, ARROW_STREAM)  # beside JSON
QUERY_MEDIA_TYPES = (ARROW_STREAM,)  # predict: beside JSON
# Text parsed into Python objects or Arrow columns takes this many times its bytes (a one-digit
# CSV value, 2 bytes, becomes 8 in its column, 8 in the design and 8 in the block).
TEXT_BODY_COST = 16

# A value by name: a number, or text (a categorical column's level).
Cell = int | float | str | None
NamedColumnValues = Annotated[dict[str, list[Cell]], Field(min_length=1)]
NamedRecordValues = Annotated[list[dict[str, Cell]], Field(min_length=1)]


class NamedColumns(BaseModel):
    """Rows by column: ``{"bmi": [...], "bp": [...], "target": [...]}``, all of one length;
    columns no model reads are ignored."""

    model_config = STRICT_JSON
    columns: NamedColumnValues


class NamedRecords(BaseModel):
    """Rows as records: ``[{"bmi": 26.4, "bp": 80.0, "target": 151.0}, …]``."""

    model_config = STRICT_JSON
    records: NamedRecordValues


class RowLimit(Exception):
    """More rows than allowed: ``rows`` of them, or None when counted only as more than the
    limit."""

    def __init__(self, rows: int | None) -> None:
        super().__init__(rows)
        self.rows = rows


def media_type(content_type: str | None) -> str:
    """``type/subtype`` of a Content-Type, lower case, parameters aside ("" for none)."""
    if not content_type:
        return ""
    message = email.message.Message()
    message["content-type"] = content_type
    return message.get_content_type()


def invalid(message: str, details: Any = None) -> ApiError:
    return ApiError(422, "invalid_chunk", message, details)


def named_form(spec: ComparisonSpec) -> ApiError:
    """422 for rows by position (or in no known form) sent to a comparison that reads names."""
    names = ", ".join(read_columns(spec, target=True))
    return invalid(
        f"this comparison reads its rows by name ({names}): send {{\"columns\": {{\"<name>\": "
        f"[...], ...}}}} or {{\"records\": [{{\"<name>\": ..., ...}}, ...]}} as JSON, or a CSV "
        f"({CSV}), Parquet ({PARQUET}) or Arrow IPC stream ({ARROW_STREAM}) body",
        {"form": "named", "columns": read_columns(spec, target=True)})


def matrix_form(spec: ComparisonSpec) -> ApiError:
    """422 for rows by name sent to a comparison whose models read columns by index."""
    return invalid(
        'this comparison reads its rows by position: send JSON {"x": [[...], ...], "y": [...]} '
        f"(rows of {spec.x_dim} numbers); its models read columns by index, not by name",
        {"form": "matrix", "x_dim": spec.x_dim})


def read_columns(spec: ComparisonSpec, target: bool) -> list[str]:
    """The columns a body must carry: the comparison's inputs (and its target)."""
    assert spec.variables is not None
    wanted = [v for v in spec.variables if v != spec.target_column]
    return [*wanted, spec.target_column] if target and spec.target_column else wanted


def json_table(data: Any, spec: ComparisonSpec, columns: list[str], max_rows: int) -> pa.Table:
    """The table of a JSON body in a named form (422 ``named_form`` for any other JSON)."""
    if not isinstance(data, dict) or len(data) != 1:
        raise named_form(spec)
    if isinstance(data.get("columns"), dict):
        given = data["columns"]
        present = [c for c in columns if c in given]
        lengths = {c: len(given[c]) for c in present if isinstance(given[c], list)}
        if len(lengths) < len(present):
            column = next(c for c in present if c not in lengths)
            raise invalid(f"column {column!r} must be a list of values",
                          {"column": column, "row": None, "value": None})
        if lengths and max(lengths.values()) > max_rows:
            raise RowLimit(max(lengths.values()))
        if len(set(lengths.values())) > 1:
            first, *_ = present
            other = next(c for c in present if lengths[c] != lengths[first])
            raise invalid(f"column {other!r} has {lengths[other]} values but column {first!r} "
                          f"has {lengths[first]}", {"column": other, "row": None, "value": None})
        return pa.table({c: _json_array(c, given[c]) for c in present})
    if isinstance(data.get("records"), list):
        records = data["records"]
        if len(records) > max_rows:
            raise RowLimit(len(records))
        for row, record in enumerate(records):
            if not isinstance(record, dict):
                raise invalid(f"record {row} is not an object of named values",
                              {"column": None, "row": row, "value": None})
        return pa.table({c: _json_array(c, _record_values(c, records))
                         for c in columns if any(c in record for record in records)})
    raise named_form(spec)


def _record_values(column: str, records: list[dict[str, Any]]) -> list[Any]:
    """One column of ``records``; every record must name it (some do: the column was sent)."""
    for row, record in enumerate(records):
        if column not in record:
            raise invalid(f"record {row} has no value for column {column!r}",
                          {"column": column, "row": row, "value": None})
    return [record[column] for record in records]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "text" if isinstance(value, str) else f"a JSON {type(value).__name__}"


def _json_array(column: str, values: list[Any]) -> pa.Array:
    """``values`` as one Arrow array; a column that mixes kinds of value (numbers and text,
    say) is refused at its first value unlike the first one."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        present = [(row, v) for row, v in enumerate(values) if v is not None]
        first = _kind(present[0][1]) if present else "a number"
        row, value = next(((r, v) for r, v in present if _kind(v) != first), (None, None))
        if row is None:
            raise invalid(f"column {column!r}: {exc}",
                          {"column": column, "row": None, "value": None}) from None
        raise invalid(f"column {column!r}, row {row}: {value!r} is {_kind(value)} where the "
                      f"rows before it hold {first}",
                      {"column": column, "row": row, "value": value}) from None


def binary_table(body: bytes, media: str, columns: list[str], max_rows: int) -> pa.Table:
    """The table of a CSV, Parquet or Arrow IPC stream body (``media``): the ``columns`` it
    has, in that order."""
    names = {CSV: "CSV", PARQUET: "Parquet", ARROW_STREAM: "Arrow IPC stream"}[media]
    try:
        if media == CSV:
            return _csv_table(body, columns, max_rows)
        if media == PARQUET:
            return _parquet_table(body, columns, max_rows)
        return _arrow_table(body, columns, max_rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise invalid(f"the body is not a readable {names} table: {exc}",
                      {"content_type": media}) from None


def _reserve(total: int) -> None:
    reservation = RESERVATION.get()
    if reservation is not None:
        reservation.ensure(total)


def _csv_table(body: bytes, columns: list[str], max_rows: int) -> pa.Table:
    # Line breaks bound the rows from above; some slack keeps the exact answer below for a
    # small max_rows (as parse_chunk's bracket count does for JSON rows).
    if body.count(b"\n") > max(max_rows, 10_000) + 2:
        raise RowLimit(None)
    _reserve(TEXT_BODY_COST * len(body))
    end = body.find(b"\n")
    header = pa_csv.read_csv(io.BytesIO(body if end < 0 else body[:end + 1])).column_names
    # One block for the whole body: a column's type is inferred from all its values.
    table = pa_csv.read_csv(
        io.BytesIO(body),
        read_options=pa_csv.ReadOptions(block_size=min(max(len(body), 1 << 20), 2**31 - 1)),
        convert_options=pa_csv.ConvertOptions(include_columns=[c for c in columns
                                                               if c in header]))
    if table.num_rows > max_rows:
        raise RowLimit(table.num_rows)
    return table


def _parquet_table(body: bytes, columns: list[str], max_rows: int) -> pa.Table:
    file = pq.ParquetFile(pa.BufferReader(body))
    metadata = file.metadata
    if metadata.num_rows > max_rows:
        raise RowLimit(metadata.num_rows)
    present = [c for c in columns if c in file.schema_arrow.names]
    # The columns read are decompressed: their uncompressed size is set aside first.
    indices = [file.schema_arrow.names.index(c) for c in present]
    uncompressed = sum(metadata.row_group(g).column(i).total_uncompressed_size
                       for g in range(metadata.num_row_groups) for i in indices)
    _reserve(TEXT_BODY_COST * len(body) + 3 * uncompressed)
    return file.read(columns=present)


def _arrow_table(body: bytes, columns: list[str], max_rows: int) -> pa.Table:
    reader = pa.ipc.open_stream(pa.BufferReader(body))
    batches, rows = [], 0
    for batch in reader:
        rows += batch.num_rows
        if rows > max_rows:
            raise RowLimit(None)
        batches.append(batch)
    table = pa.Table.from_batches(batches, reader.schema)
    return table.select([c for c in columns if c in table.column_names])


def named_design(
    spec: ComparisonSpec, table: pa.Table, target: bool
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The design rows of ``table`` (x in the stored design order, y the target; every value
    finite and within ±MAX_ABS_VALUE), or a 422 naming the column, row and value."""
    try:
        return design_rows(spec, table, target=target)
    except NamedDataError as exc:
        raise invalid(str(exc), exc.details) from None
