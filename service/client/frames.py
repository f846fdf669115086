"""Data frames with named columns for the clients: a pandas or Polars DataFrame, a pyarrow
Table or RecordBatch, or anything with the Arrow stream protocol (``__arrow_c_stream__``) or the
dataframe interchange protocol (``__dataframe__``), sent as one Arrow IPC stream body.

pandas and polars are optional for users: nothing here imports them. A pandas frame is
recognised through ``sys.modules`` (a frame exists only where pandas is loaded), the others by
their attributes; pyarrow is imported once a frame is sent.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

ARROW_STREAM = "application/vnd.apache.arrow.stream"
Frame = Any  # anything ``is_frame`` accepts


def is_frame(data: object) -> bool:
    """Whether ``data`` is a frame of named columns rather than rows of numbers (numpy arrays,
    tensors and lists have neither protocol)."""
    return hasattr(data, "__arrow_c_stream__") or hasattr(data, "__dataframe__")


def frame_table(frame: Frame) -> pa.Table:
    """The frame as a pyarrow Table of plain column types (``_plain``)."""
    import pyarrow as pa

    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(frame, pandas.DataFrame):
        # The index is not data: Arrow's own conversion would send a non-default one as a column.
        table = pa.Table.from_pandas(frame, preserve_index=False)
    elif hasattr(frame, "__arrow_c_stream__"):
        table = pa.table(frame)
    else:
        import pyarrow.interchange

        table = pyarrow.interchange.from_dataframe(frame)
    return _plain(table)


def arrow_stream(frame: Frame) -> bytes:
    """The frame as one Arrow IPC stream (the body of ``application/vnd.apache.arrow.stream``)."""
    import pyarrow as pa

    table = frame_table(frame)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def _plain(table: pa.Table) -> pa.Table:
    """Categorical (dictionary) columns decoded, large and view strings as plain strings, and no
    schema metadata: types every pyarrow since 15 reads (the server's may be older than the
    client's; Polars sends string views, pandas large strings and its own metadata)."""
    import pyarrow as pa

    schema = pa.schema([pa.field(field.name, _plain_type(field.type)) for field in table.schema])
    batches = [pa.RecordBatch.from_arrays([_plain_array(c) for c in batch.columns], schema=schema)
               for batch in table.to_batches()]
    return pa.Table.from_batches(batches, schema=schema)


def _plain_type(kind: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _plain_type(kind.value_type)
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.string()
    return kind


def _plain_array(array: pa.Array) -> pa.Array:
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        # take on the decoded dictionary: pyarrow cannot cast a dictionary of string views
        return _plain_array(array.dictionary).take(array.indices)
    plain = _plain_type(array.type)
    return array if plain == array.type else array.cast(plain)
