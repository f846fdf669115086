"""``modelcompare ingest``: check a whole file against the comparison, then send it in chunks
keyed so that any re-run of the same rows is a no-op, whatever ``--chunk-size``.

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
from typing import Any, NamedTuple

import numpy as np
import torch

from modelcompare.models.target import Target
from modelcompare.service.cli.errors import CliError
from modelcompare.service.cli.files import FileData, existing, read_data
from modelcompare.service.cli.tables import evidence_table
from modelcompare.service.client import Client, ModelCompareError
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.validation import Refusal


class ChunkKeys:
    """Idempotency-Keys of a file's chunks: the key of the chunk starting at row ``a`` hashes
    rows 0 … a (inclusive) as sent, so it depends neither on where chunks are cut nor on any row
    after ``a``. Keys are asked for in increasing order of ``a``."""

    def __init__(self, data: FileData, salt: str) -> None:
        target = None if data.y is None else data.y[:, None]
        columns = [c for c in (data.x, target) if c is not None]
        self._rows = np.ascontiguousarray(np.column_stack(columns), dtype=np.float64)
        layout = f"modelcompare-ingest-v1|x:{0 if data.x is None else data.x.shape[1]}|" \
                 f"y:{data.y is not None}|{salt}"
        self._hash = hashlib.sha256(layout.encode())
        self._hashed = 0  # rows already in _hash

    def at(self, start: int) -> str:
        assert start >= self._hashed, "keys are asked for in increasing order"
        self._hash.update(self._rows[self._hashed : start].tobytes())
        self._hashed = start
        head = self._hash.copy()
        head.update(self._rows[start].tobytes())
        return f"rows-{head.hexdigest()[:40]}"


def comparison_spec(described: dict[str, Any]) -> ComparisonSpec:
    """The stored spec, from ``GET /v1/comparisons/{id}`` (no model is built from it: the
    family may not be installed here)."""
    models = [ModelSpec(name=m["name"], family=m["family"], package=m.get("package"),
                        version=m.get("version"), config=m["config"], columns=m["columns"],
                        prior_weight=m["prior_probability"], target=m.get("target"))
              for m in described["models"]]
    fields = ("id", "name", "seed", "created_at", "x_dim", "has_y", "estimator")
    return ComparisonSpec(**{k: described[k] for k in fields}, models=models)


def check_file(spec: ComparisonSpec, data: FileData, name: str, x_cols: list[str],
               y_col: str | None) -> None:
    """What the server would refuse, found before anything is sent: widths, target, labels,
    and the values each model's y may take as the server describes them (``Target``), naming
    the first data row a model refuses. A plugin family's own further rules are the server's to
    apply: such a refusal stops the send at that chunk."""
    reads = "; ".join(f"{m.name} reads columns {m.columns}" for m in spec.models if m.columns)
    if spec.x_dim != len(x_cols):
        wanted = "no --x-cols (no model reads x)" if not spec.x_dim else \
            f"{spec.x_dim} input columns (x_dim; {reads})"
        raise CliError(f"comparison {spec.name!r} takes {wanted}, but --x-cols names "
                       f"{len(x_cols)}" + (f": {', '.join(x_cols)}" if x_cols else ""))
    if spec.has_y != (y_col is not None):
        raise CliError(f"comparison {spec.name!r} needs a target: name it with --y-col"
                       if spec.has_y else
                       f"no model of comparison {spec.name!r} has a target: leave out --y-col")
    if data.labels is not None:
        numeric = [f"{m.name} ({m.family})" for m in spec.models
                   if m.target is not None and m.target["kind"] != "label"]
        if numeric:
            raise CliError(f"column {y_col!r} of {name} holds labels ({', '.join(data.labels)}), "
                           f"but these models need numbers: {', '.join(numeric)}")
    refusal = None if data.y is None else first_refusal(spec, torch.from_numpy(data.y))
    if refusal is not None:
        hint = ""
        if data.labels is not None:
            label = data.labels[int(data.y[refusal.row])]  # type: ignore[index]
            hint = (f" (label {label!r}; the file has {len(data.labels)} labels, numbered from "
                    "0)")
        elif (spec.model(refusal.model).target or {}).get("kind") == "label":
            hint = ("; class labels are whole numbers from 0 (text labels are numbered for you: "
                    "sorted, or in --labels order)")
        raise CliError(refusal.describe(f"data row {refusal.row + 1} of {name}") + hint)


def first_refusal(spec: ComparisonSpec, y: torch.Tensor) -> Refusal | None:
    """The first model (in the spec's order) whose target refuses a value of ``y``, with the
    first such row, or None."""
    for model in spec.models:
        if model.target is None:
            continue
        target = Target.of(model.target)
        refused = torch.nonzero(target.refused(y)).flatten()
        if refused.numel():
            row = int(refused[0])
            return Refusal(model.name, f"{model.family} needs {target.requirement()}", row,
                           f"y = {float(y[row]):g}")
    return None


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


def send(api: Client, cid: str, data: FileData, size: int, keys: ChunkKeys,
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


def _post(api: Client, cid: str, data: FileData, start: int, stop: int,
          key: str) -> dict[str, Any] | int | None:
    """The server's reply; for a key it holds with another body (409), the rows it holds
    under the key (None when its record does not say)."""
    try:
        return api.ingest(cid, None if data.x is None else data.x[start:stop],
                          None if data.y is None else data.y[start:stop], idempotency_key=key)
    except ModelCompareError as exc:
        if exc.code != "idempotency_conflict":
            raise
        recorded = (exc.details or {}).get("rows")
        return recorded if isinstance(recorded, int) else None


def _confirm(api: Client, cid: str, data: FileData, start: int, key: str,
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
    x_cols = [c for item in args.x_cols or [] for c in item.split(",") if c]
    if not x_cols and args.y_col is None:
        raise CliError("name the columns to send: --x-cols and/or --y-col")
    data = read_data(path, x_cols, args.y_col, args.labels)
    if data.rows == 0:
        raise CliError(f"{path.name} has no data rows (only a header): nothing to send")
    console = Console(stderr=True, soft_wrap=True, highlight=False)  # lines unwrapped
    with Client(args.url, args.api_key) as api:
        spec = comparison_spec(api.get_comparison(args.comparison))
        if data.labels is not None:
            console.print(f"labels of column {args.y_col!r} → classes: "
                          + ", ".join(f"{label} = {k}" for k, label in enumerate(data.labels)),
                          markup=False)
        check_file(spec, data, path.name, x_cols, args.y_col)
        columns = (TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("rows"))
        try:
            with Bar(*columns, console=console) as bar:
                task = bar.add_task("sent", total=data.rows)
                progress, chunks = send(api, args.comparison, data, args.chunk_size,
                                        ChunkKeys(data, args.key_salt),
                                        lambda rows: bar.advance(task, rows))
                evidence = _wait_applied(api, args.comparison, chunks, bar) if args.wait \
                    else api.evidence(args.comparison)
        except PartialSend as stopped:
            console.print(_partial_note(stopped, path.name), markup=False)
            raise stopped.error from None
    console.print(_summary(progress, path.name), markup=False)
    console.print(evidence_table(evidence))
    if evidence.get("status") == "degraded":
        raise CliError(f"the comparison is degraded: {evidence.get('status_reason')}")


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
