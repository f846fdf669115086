"""Which row of a chunk a comparison's models refuse, and with what value: the API's 422 and the
CLI's check of a whole file before it sends anything name the row, not only the rule."""

from __future__ import annotations

from typing import NamedTuple

from modelcompare.estimators import Rows
from modelcompare.service.engine import Runner, runner_for
from modelcompare.service.schemas import ComparisonSpec, ModelSpec
from modelcompare.service.store.codec import decode_block


class Refusal(NamedTuple):
    """Model ``model`` refuses ``rows`` (``reason``); ``row`` (from 0) is the first row it
    refuses, ``value`` what that row holds: its y, or the x columns the model reads."""

    model: str
    reason: str
    row: int
    value: str

    def describe(self, row: str) -> str:
        """One line, ``row`` saying where the row is for the reader (e.g. "row 3 of the chunk")."""
        return f"model {self.model!r} refuses {row}, {self.value}: {self.reason}"


def first_refusal(spec: ComparisonSpec, rows: Rows) -> Refusal | None:
    """The first model (in the spec's order) that refuses ``rows``, with the first row it
    refuses, or None when every model accepts them all."""
    for model in spec.models:
        runner = runner_for(spec, model)
        try:
            runner.validate(rows)
        except ValueError as exc:
            row = _first_refused_row(runner, rows)
            value = _value(runner.select(rows.slice(row, row + 1)))
            return Refusal(model.name, str(exc), row, value)
    return None


def first_stored_refusal(spec: ComparisonSpec, model: ModelSpec,
                         chunks: list[tuple[int, bytes]]) -> tuple[int, Refusal] | None:
    """The first of ``chunks`` ((sequence, block), in order) that ``model`` refuses, with the
    refusal, or None: a model added mid-stream must accept every row stored or queued."""
    alone = spec.model_copy(update={"models": [model]})
    for sequence, block in chunks:
        rows = decode_block(block)
        refusal = first_refusal(alone, rows) if rows.count else None
        if refusal is not None:
            return sequence, refusal
    return None


def _first_refused_row(runner: Runner, rows: Rows) -> int:
    """Bisection on prefixes: a prefix is refused once it holds a refused row (row checks)."""
    accepted, refused = 0, rows.count  # the prefix of `accepted` rows passes, `refused` fails
    while refused - accepted > 1:
        middle = (accepted + refused) // 2
        try:
            runner.validate(rows.slice(0, middle))
            accepted = middle
        except ValueError:
            refused = middle
    return refused - 1


def _value(row: Rows) -> str:
    if row.y is not None:
        return f"y = {float(row.y[0]):g}"
    assert row.x is not None
    return "x = [" + ", ".join(f"{float(v):g}" for v in row.x[0]) + "]"
