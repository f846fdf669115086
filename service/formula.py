"""Models by formula: a Wilkinson formula (parsed and materialised by formulaic) compiled once
into a frozen design, and the design rows of a chunk of named columns.

The design of a formula is a function of its text alone: categorical levels are declared in it
(``C(sex, levels=[1, 2])``) and data-dependent transforms are refused
(``modelcompare.service.formula_factors``), so the frozen ``formulaic.ModelSpec`` comes from a
synthetic frame built from the declared levels, and every process (API, workers) derives the
same design columns from the stored text. The intercept is the family's own bias: it is never a
design column. A comparison stores the union of its models' design columns (``Design``); each
model reads its own by index.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import formulaic
import numpy as np
import pandas as pd
import pyarrow as pa
from formulaic.errors import FormulaicError

from modelcompare.models.config import MAX_INPUT_DIM
from modelcompare.service.formula_factors import (
    FormulaError,
    Level,
    check_expansion,
    first_line,
    read_terms,
    reading,
    target_of,
)
from modelcompare.service.records import MAX_ABS_VALUE, ComparisonSpec

__all__ = ["CompiledFormula", "Design", "FormulaError", "NamedDataError", "check_stored",
           "compile_formula", "design_rows", "joint_design"]

MAX_FORMULA_CHARS = 1_000


class NamedDataError(ValueError):
    """Named data that cannot make design rows; ``details`` names the column, the row (from 0;
    None for a missing column) and the value."""

    def __init__(self, message: str, column: str, row: int | None, value: Any) -> None:
        super().__init__(message)
        self.details = {"column": column, "row": row, "value": _json_value(value)}


@dataclass(frozen=True)
class CompiledFormula:
    """A formula frozen into its design: ``columns`` are the design columns without the
    intercept, in formulaic's order (terms by degree); ``variables`` the input columns it reads
    (first seen over its terms); ``levels`` those read as categories, with their levels."""

    text: str
    spec: formulaic.ModelSpec
    target: str | None
    variables: list[str]
    levels: dict[str, list[Level]]
    columns: list[str]


@functools.lru_cache(maxsize=1024)
def compile_formula(text: str) -> CompiledFormula:
    """The frozen design of ``text``, or ``FormulaError`` with the reason."""
    if len(text) > MAX_FORMULA_CHARS:
        raise FormulaError(f"a formula has at most {MAX_FORMULA_CHARS:,} characters, got "
                           f"{len(text):,}")
    check_expansion(text)
    try:
        formula = formulaic.Formula(text)
    except (FormulaicError, SyntaxError, ValueError) as exc:
        raise FormulaError(f"formula {text!r}: {first_line(exc)}") from None
    rhs = getattr(formula, "rhs", formula)
    if not isinstance(rhs, formulaic.SimpleFormula):
        raise FormulaError(f"formula {text!r}: one right side only (no '|' parts)")
    target = target_of(text, getattr(formula, "lhs", None))
    if not any(str(term) == "1" for term in rhs):
        raise FormulaError(
            f"formula {text!r} removes the intercept: the intercept is the model's own bias, "
            "which the family always has, and it fixes how categories are coded (against the "
            "first declared level); leave out '- 1', '+ 0' and '0 +'")
    variables, levels = read_terms(text, rhs)
    if target is not None and target in variables:
        raise FormulaError(f"formula {text!r}: the right side reads the target {target!r}")
    spec = _frozen_spec(text, rhs, variables, levels)
    # formulaic orders terms by degree: the intercept term, of degree 0, is the first column
    columns = list(spec.column_names[1:])
    if len(columns) > MAX_INPUT_DIM:
        raise FormulaError(f"formula {text!r} makes {len(columns):,} design columns; a model "
                           f"reads at most {MAX_INPUT_DIM:,}")
    return CompiledFormula(text, spec, target, variables, levels, columns)


def _frozen_spec(text: str, rhs: formulaic.SimpleFormula, variables: list[str],
                 levels: dict[str, list[Level]]) -> formulaic.ModelSpec:
    """The ModelSpec of ``rhs`` materialised on a frame of the declared levels (each at least
    once) and ones: no transform depends on the data, so the values do not matter."""
    rows = max([2, *(len(v) for v in levels.values())])
    frame = pd.DataFrame({name: _categories(np.arange(rows) % len(levels[name]), levels[name])
                          if name in levels else np.ones(rows) for name in variables},
                         index=range(rows))
    try:
        with np.errstate(all="ignore"):
            # na_action "ignore": a row is never dropped (design_rows refuses NaN it makes)
            matrix = rhs.get_model_matrix(frame, na_action="ignore", output="numpy")
    except (FormulaicError, ArithmeticError, TypeError, ValueError) as exc:
        raise FormulaError(f"formula {text!r}: {first_line(exc)}") from None
    return matrix.model_spec


@dataclass(frozen=True)
class Design:
    """The design columns a comparison stores: the union of its formulas' columns in first-seen
    order; the input columns chunks carry; categories with their levels; the target; and the
    formulas that make the columns (kept when their models are removed)."""

    columns: list[str]
    variables: list[str]
    levels: dict[str, list[Level]]
    target: str | None
    formulas: list[str]


def joint_design(texts: Sequence[str]) -> Design:
    """The design of a comparison whose models have the formulas ``texts``: ``FormulaError``
    unless they name one target and read each input column one way (numbers, or categories
    with the same levels)."""
    compiled = [compile_formula(text) for text in texts]
    targets = list(dict.fromkeys(f.target for f in compiled if f.target is not None))
    if len(targets) > 1:
        raise FormulaError(f"the models' formulas name different targets: "
                           f"{', '.join(map(repr, targets))}; a comparison has one")
    columns: list[str] = []
    variables: list[str] = []
    levels: dict[str, list[Level]] = {}
    for formula in compiled:
        for name in formula.variables:
            _read_once(name, levels, formula.levels.get(name), name in variables)
            if name not in variables:
                variables.append(name)
        columns += [c for c in formula.columns if c not in columns]
    formulas = list(dict.fromkeys(texts))
    return Design(columns, variables, levels, targets[0] if targets else None, formulas)


def _read_once(name: str, levels: dict[str, list[Level]], declared: list[Level] | None,
               seen: bool) -> None:
    if seen and levels.get(name) != declared:
        shown = [levels.get(name), declared]
        raise FormulaError(f"the models read {name!r} as {' and as '.join(map(reading, shown))}; "
                           "every model reads a column one way (the same levels)")
    if declared is not None:
        levels[name] = declared


def check_stored(text: str, spec: ComparisonSpec) -> None:
    """``FormulaError`` naming what ``text``, a model added to a stored named comparison, reads
    that was never stored (or another target)."""
    formula = compile_formula(text)
    design = spec.design or []
    missing = [c for c in formula.columns if c not in design]
    missing += [v for v in formula.variables if v not in (spec.variables or [])]
    if missing:
        named = ", ".join(map(repr, dict.fromkeys(missing)))
        raise FormulaError(f"formula {text!r} reads {named}, never stored: this comparison "
                           f"stores {', '.join(design) or 'no column'} (its design is fixed "
                           "when it is created)")
    if formula.target is not None and formula.target != spec.target_column:
        raise FormulaError(f"formula {text!r} names the target {formula.target!r}; this "
                           f"comparison's is {spec.target_column!r}")
    joint_design([*(spec.design_formulas or []), text])  # categories with the stored levels


Part = tuple[CompiledFormula, list[int], list[int]]  # a formula: its columns -> stored columns


@functools.lru_cache(maxsize=256)
def _plan(formulas: tuple[str, ...], columns: tuple[str, ...]) -> tuple[Design, list[Part]]:
    """The stored design of a named comparison and the formulas that make its columns, each
    column once; widest formulas first, so fewer are materialised (a column has the same values
    whichever formula makes it). They include formulas whose models were removed."""
    design = joint_design(formulas)
    parts: list[Part] = []
    made: set[str] = set()
    for formula in sorted(map(compile_formula, design.formulas), key=lambda f: -len(f.columns)):
        pairs = [(i + 1, columns.index(c)) for i, c in enumerate(formula.columns)  # 0: intercept
                 if c in columns and c not in made]
        made.update(formula.columns)
        if pairs:
            parts.append((formula, [s for s, _ in pairs], [t for _, t in pairs]))
    if set(columns) - made:
        raise RuntimeError(f"stored design columns {sorted(set(columns) - made)} are made by "
                           f"none of the formulas {list(formulas)} (another formulaic version?)")
    return design, parts


def design_rows(spec: ComparisonSpec, table: pa.Table,
                target: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
    """x (rows × x_dim float64, in the stored design order; None when no model reads x) and y
    (float64; None without a target or with ``target`` False, for query rows) from the named
    columns of ``table`` (others ignored); ``NamedDataError`` naming the column, row and value
    that cannot make them."""
    design, parts = _plan(tuple(spec.design_formulas or ()), tuple(spec.design or ()))
    reads_target = target and design.target is not None
    names = [*design.variables, *([design.target] if reads_target else [])]
    for name in names:
        found = len(table.schema.get_all_field_indices(name))
        if found != 1:
            what = "is missing" if not found else f"appears {found} times"
            raise NamedDataError(f"column {name!r} {what}: this comparison's rows carry "
                                 f"{', '.join(names)}", name, None, None)
    inputs = {name: _categories(_level_codes(table.column(name), name, design.levels[name]),
                                design.levels[name])
              if name in design.levels else _numbers(table.column(name), name)
              for name in design.variables}
    y = _numbers(table.column(names[-1]), names[-1]) if reads_target else None
    if not spec.design:
        return None, y
    data = pd.DataFrame(inputs, index=range(table.num_rows))
    x = np.empty((table.num_rows, len(spec.design)))
    for formula, sources, stored in parts:
        with np.errstate(all="ignore"):
            x[:, stored] = np.asarray(formula.spec.get_model_matrix(data))[:, sources]
    _check_values(x, spec.design)
    return x, y


def _numbers(column: pa.ChunkedArray, name: str) -> np.ndarray:
    """A numeric column as float64: refused (naming the first such row) when it holds text,
    booleans, nulls, or values that are not finite within ±MAX_ABS_VALUE."""
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        values = column.to_pylist()
        row = next((i for i, v in enumerate(values) if not _is_number_text(v)), 0)
        raise NamedDataError(f"column {name!r}, row {row} (from 0): {values[row]!r} is not a "
                             "number", name, row, values[row])
    if column.null_count:
        row = column.is_null().to_numpy(zero_copy_only=False).argmax()
        raise NamedDataError(f"column {name!r}, row {row} (from 0): a value is missing",
                             name, int(row), None)
    values = column.to_numpy().astype(np.float64)
    _check_values(values[:, None], [name])
    return values


def _is_number_text(value: Any) -> bool:
    # a text column reads as numbers row by row until the first value that is not one
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def _check_values(values: np.ndarray, columns: list[str]) -> None:
    bad = ~(np.abs(values) <= MAX_ABS_VALUE)  # NaN compares False
    if bad.any():
        row, index = (int(i) for i in np.argwhere(bad)[0])
        value = float(values[row, index])
        raise NamedDataError(f"column {columns[index]!r}, row {row} (from 0): {value} is not a "
                             f"finite number within ±{MAX_ABS_VALUE:g}", columns[index], row,
                             value)


def _level_codes(column: pa.ChunkedArray, name: str, levels: list[Level]) -> np.ndarray:
    """Each row's index into ``levels``; a value not among them is refused, naming it."""
    values = column.to_pandas()
    if pa.types.is_boolean(column.type):  # True == 1: a boolean would pass as level 1
        codes = np.full(len(values), -1)
    else:
        codes = pd.Index(levels).get_indexer(values)
    if (codes < 0).any():
        row = int(np.argmax(codes < 0))
        value = _json_value(values.iloc[row])
        raise NamedDataError(f"column {name!r}, row {row} (from 0): {value!r} is not a "
                             f"declared level of {name!r} (levels {levels})", name, row, value)
    return codes


def _categories(codes: np.ndarray, levels: list[Level]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=levels)


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float | np.floating):
        return float(value) if np.isfinite(value) else str(value)
    if isinstance(value, np.integer):
        return int(value)
    return str(value)
