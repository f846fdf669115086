"""``modelcompare ingest``: check a whole file against the comparison, then send it in chunks
keyed so that any re-run of the same rows is a no-op, whatever ``--chunk-size``. A comparison
by formula names the columns it reads: they are sent as Arrow IPC bodies (``named``); any other
takes rows of numbers from the columns --x-cols and --y-col name.

A chunk's Idempotency-Key hashes every row before it and its own first row (``ChunkKeys``).
The server records key → (digest of the chunk, its rows). A re-run cut like the first run meets
the same keys with the same bodies: duplicates. A re-run cut differently meets the first key
with another body (409, which reports the rows recorded under that key): it re-sends exactly
those rows under that key, which the server confirms as a duplicate, and goes on after them.
Rows the server has under a key but with other values are refused, never sent twice.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from modelcompare.service.cli.checks import check_target, check_widths, comparison_spec
from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import FileData, existing, read_data
from modelcompare.service.cli.named import NamedFile, read_named, takes_names
from modelcompare.service.cli.tables import evidence_table, formulas
from modelcompare.service.client import Client, ModelCompareError
from modelcompare.service.records import ComparisonSpec


class ChunkKeys:
    """Idempotency-Keys of a file's chunks: the key of the chunk starting at row ``a`` hashes
    rows 0 … a (inclusive) as sent, so it depends neither on where chunks are cut nor on any row
    after ``a``. Keys are asked for in increasing order of ``a``.

    A row is its input cells in order, then its target: a number as its float64 bytes, a text
    (a categorical input of a comparison by formula) as the length of its UTF-8 bytes, then
    those bytes."""

    def __init__(self, inputs: Sequence[np.ndarray], y: np.ndarray | None, salt: str) -> None:
        columns = [*inputs, *([] if y is None else [y])]
        if all(column.dtype != object for column in columns):
            self._rows: np.ndarray | list[bytes] = np.ascontiguousarray(
                np.column_stack(columns), dtype=np.float64)
        else:
            self._rows = [b"".join(map(_cell, row)) for row in zip(*columns, strict=True)]
        layout = f"modelcompare-ingest-v1|x:{len(inputs)}|y:{y is not None}|{salt}"
        self._hash = hashlib.sha256(layout.encode())
        self._hashed = 0  # rows already in _hash

    def at(self, start: int) -> str:
        assert start >= self._hashed, "keys are asked for in increasing order"
        self._hash.update(self._bytes(self._hashed, start))
        self._hashed = start
        head = self._hash.copy()
        head.update(self._bytes(start, start + 1))
        return f"rows-{head.hexdigest()[:40]}"

    def _bytes(self, start: int, stop: int) -> bytes:
        rows = self._rows[start:stop]
        return rows.tobytes() if isinstance(rows, np.ndarray) else b"".join(rows)


def _cell(value: Any) -> bytes:
    if isinstance(value, str):
        text = value.encode()
        return len(text).to_bytes(8, "little") + text
    return np.float64(value).tobytes()


class Body(NamedTuple):
    """What ``send`` cuts into chunks: rows of numbers ``x`` with targets ``y`` (a comparison by
    position), or one table of named columns ``x``, its target among them (by formula)."""

    x: Any  # a numpy array, a pyarrow Table or None: both slice by rows
    y: np.ndarray | None
    rows: int

    def part(self, start: int, stop: int) -> tuple[Any, np.ndarray | None]:
        return (None if self.x is None else self.x[start:stop],
                None if self.y is None else self.y[start:stop])


class Progress(NamedTuple):
    done: int  # rows 0 … done − 1 are on the server (sent now, or found there)
    sent_rows: int
    sent_chunks: int
    found_rows: int  # already there from an earlier run
    found_chunks: int


class Chunk(NamedTuple):
    sequence: int
    rows: int


class PartialSend(Exception):
    """Sending stopped at ``error``: rows before ``progress.done`` are on the server; the chunk
    of rows ``start`` … ``stop − 1`` was being sent."""

    def __init__(self, error: Exception, progress: Progress, start: int, stop: int) -> None:
        super().__init__(str(error))
        self.error, self.progress, self.start, self.stop = error, progress, start, stop


def send(api: Client, cid: str, data: Body, size: int, keys: ChunkKeys,
         advance: Any) -> tuple[Progress, list[Chunk]]:
    """Send rows ``0 … data.rows − 1`` in chunks of ``size`` (re-runs: see the module's
    docstring), calling ``advance(rows)`` after each chunk; ``PartialSend`` on an error."""
    progress, chunks = Progress(0, 0, 0, 0, 0), []
    while progress.done < data.rows:
        start = progress.done
        stop = min(start + size, data.rows)
        key = keys.at(start)
        try:
            reply = _post(api, cid, data, start, stop, key)
            if not isinstance(reply, dict):  # an earlier run cut here differently
                reply = _confirm(api, cid, data, start, key, reply)
        except (ModelCompareError, CliError) as exc:
            raise PartialSend(exc, progress, start, stop) from exc
        rows, duplicate = reply["rows"], reply["duplicate"]
        chunks.append(Chunk(reply["sequence"], rows))
        progress = progress._replace(
            done=start + rows,
            sent_rows=progress.sent_rows + (0 if duplicate else rows),
            sent_chunks=progress.sent_chunks + (not duplicate),
            found_rows=progress.found_rows + (rows if duplicate else 0),
            found_chunks=progress.found_chunks + duplicate)
        advance(rows)
    return progress, chunks


def _post(api: Client, cid: str, data: Body, start: int, stop: int,
          key: str) -> dict[str, Any] | int | None:
    """The server's reply; for a key it holds with another body (409), the rows it holds
    under the key (None when its record does not say)."""
    try:
        return api.ingest(cid, *data.part(start, stop), idempotency_key=key)
    except ModelCompareError as exc:
        if exc.code != "idempotency_conflict":
            raise
        recorded = (exc.details or {}).get("rows")
        return recorded if isinstance(recorded, int) else None


def _confirm(api: Client, cid: str, data: Body, start: int, key: str,
             recorded: int | None) -> dict[str, Any]:
    """The server's duplicate reply for the ``recorded`` rows from ``start`` that an earlier run
    sent under ``key``; ``CliError`` when these rows are not those."""
    fresh = "; if this file is new data that begins with the same rows, send it with --key-salt"
    if recorded is None:
        raise CliError(f"the server holds a chunk under the key of data row {start + 1} but does "
                       f"not say its size (an older server){fresh}")
    if recorded > data.rows - start:
        raise CliError(f"a chunk of {recorded} rows was sent before from data row {start + 1}, "
                       f"but the file has only {data.rows - start} rows from there: it is not a "
                       f"re-run of that file{fresh}")
    reply = _post(api, cid, data, start, start + recorded, key)
    if not isinstance(reply, dict) or not reply["duplicate"]:
        raise CliError(f"data rows {start + 1}–{start + recorded} were sent before with other "
                       f"values under the same key: this file is not a re-run of that one{fresh}")
    return reply


def ingest(args: argparse.Namespace) -> None:
    """Check the whole file, send it (progress in rows), wait until the worker applied it (not
    with ``--no-wait``) and print the table."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
    from rich.progress import Progress as Bar

    if args.chunk_size < 1:
        raise CliError("--chunk-size must be at least 1")
    path = existing(args.file)
    console = Console(stderr=True, soft_wrap=True, highlight=False)  # lines unwrapped
    with Client(args.url, args.api_key) as api:
        described = api.get_comparison(args.comparison)
        spec = comparison_spec(described)
        data, body, keys, y_col = _read(spec, path, args)
        if data.labels is not None:
            console.print(f"labels of column {y_col!r} → classes: "
                          + ", ".join(f"{label} = {k}" for k, label in enumerate(data.labels)),
                          markup=False)
        check_target(spec, data, path.name, y_col)
        columns = (TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("rows"))
        try:
            with Bar(*columns, console=console) as bar:
                task = bar.add_task("sent", total=body.rows)
                progress, chunks = send(api, args.comparison, body, args.chunk_size, keys,
                                        lambda rows: bar.advance(task, rows))
                evidence = _wait_applied(api, args.comparison, chunks, bar) if args.wait \
                    else api.evidence(args.comparison)
        except PartialSend as stopped:
            console.print(_partial_note(stopped, path.name), markup=False)
            raise stopped.error from None
    console.print(_summary(progress, path.name), markup=False)
    console.print(evidence_table(evidence, formulas(described)))
    if evidence.get("status") == "degraded":
        raise CliError(f"the comparison is degraded: {evidence.get('status_reason')}")


def _read(spec: ComparisonSpec, path: Path, args: argparse.Namespace
          ) -> tuple[FileData | NamedFile, Body, ChunkKeys, str | None]:
    """The file's rows the comparison reads, checked (``check_target`` aside), what ``send``
    sends, its keys, and the target column: a comparison by formula names its columns, any
    other takes them from --x-cols and --y-col."""
    x_cols = [c for item in args.x_cols or [] for c in item.split(",") if c]
    data: FileData | NamedFile
    if spec.variables is not None:
        if x_cols or args.y_col is not None:
            raise CliError(takes_names(spec, "--x-cols" if x_cols else "--y-col"))
        data = read_named(path, spec, target=True, labels=args.labels)
        body, keys = Body(data.table, None, data.rows), ChunkKeys(data.inputs, data.y,
                                                                  args.key_salt)
        y_col = spec.target_column
    else:
        if not x_cols and args.y_col is None:
            raise CliError("name the columns to send: --x-cols and/or --y-col")
        data = read_data(path, x_cols, args.y_col, args.labels)
        check_widths(spec, x_cols, args.y_col)
        inputs = [] if data.x is None else list(data.x.T)
        body, keys = Body(data.x, data.y, data.rows), ChunkKeys(inputs, data.y, args.key_salt)
        y_col = args.y_col
    if data.rows == 0:
        raise CliError(f"{path.name} has no data rows (only a header): nothing to send")
    return data, body, keys, y_col


def _summary(progress: Progress, name: str) -> str:
    sent = f"sent {progress.sent_rows} rows of {name} in {progress.sent_chunks} chunks"
    if not progress.found_rows:
        return sent
    if not progress.sent_rows:
        return (f"sent no rows of {name}: all {progress.found_rows} were already ingested "
                f"({progress.found_chunks} chunks): skipped")
    return (f"{sent}; {progress.found_rows} rows ({progress.found_chunks} chunks) were already "
            "ingested: skipped")


def _partial_note(stopped: PartialSend, name: str) -> str:
    done, (first, last) = stopped.progress.done, (stopped.start + 1, stopped.stop)
    accepted = (f"data rows 1–{done} of {name} are on the server and count"
                if done else f"no row of {name} was accepted")
    unknown = isinstance(stopped.error, ModelCompareError) and stopped.error.outcome_unknown
    fate = (f"rows {first}–{last} may or may not have been accepted"
            if unknown else f"rows {first}–{last} were not")
    return (f"stopped at data row {first}: {accepted}; {fate}. Fix what the error says and run "
            "the same command again: rows already on the server are skipped, not counted twice")


def _wait_applied(api: Client, cid: str, chunks: list[Chunk], bar: Any) -> dict[str, Any]:
    """The evidence once every chunk is applied (or the comparison is degraded)."""
    task = bar.add_task("applied", total=sum(c.rows for c in chunks))
    last = max(c.sequence for c in chunks)
    while True:
        evidence = api.evidence(cid)
        bar.update(task, completed=sum(c.rows for c in chunks
                                       if c.sequence <= evidence["sequence"]))
        if evidence["sequence"] >= last or evidence.get("status") == "degraded":
            return evidence
        time.sleep(0.2)
