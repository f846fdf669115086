"""Models by formula: what compiles (the design columns, exactly), what is refused (with the
reason), and the design rows of named columns against hand-built matrices."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from modelcompare.service.formula import (
    FormulaError,
    NamedDataError,
    check_stored,
    compile_formula,
    design_rows,
    joint_design,
)
from modelcompare.service.limits import Limits
from modelcompare.service.schemas import ComparisonIn, ComparisonSpec, comparison_spec

LIMITS = Limits(max_models=50, max_comparison_parameters=100_000, max_state_bytes=10**9,
                max_x_dim=1_000, max_rules=20, max_rule_window_rows=10_000)
SEX = 'C(sex, levels=["f", "m", "x"])'
INTERACTION = f"target ~ bmi + {SEX} + bmi:{SEX}"


def named_spec(*formulas: str, family: str = "linear_regression") -> ComparisonSpec:
    request = ComparisonIn.model_validate({"name": "named", "models": [
        {"name": f"m{i}", "family": family, "formula": f} for i, f in enumerate(formulas)]})
    return comparison_spec(request, "cid", 0.0, LIMITS)


def rows() -> pa.Table:
    return pa.table({"bmi": [1.5, -2.0, 0.25, 4.0], "bp": [10, 20, 30, 40],
                     "sex": ["m", "f", "x", "m"], "target": [0.5, 1.0, -1.0, 2.0],
                     "unused": ["a", "b", "c", "d"]})


def test_a_categorical_input_and_its_interaction_equal_the_hand_built_design() -> None:
    """Treatment coding against the first declared level ("f"), as the intercept implies; the
    interaction with bmi is coded the same way, since bmi and C(sex) come before it."""
    spec = named_spec(INTERACTION, "target ~ bmi + np.log(bp)")
    levels = "levels=['f', 'm', 'x']"
    assert spec.design == ["bmi", f"C(sex, {levels})[T.m]", f"C(sex, {levels})[T.x]",
                           f"bmi:C(sex, {levels})[T.m]", f"bmi:C(sex, {levels})[T.x]",
                           "np.log(bp)"]
    assert spec.variables == ["bmi", "sex", "bp"]
    assert spec.target_column == "target"
    assert [m.columns for m in spec.models] == [[0, 1, 2, 3, 4], [0, 5]]
    assert [m.config["dim"] for m in spec.models] == [5, 2]
    bmi, male, other = np.array([1.5, -2.0, 0.25, 4.0]), np.array([1.0, 0, 0, 1]), \
        np.array([0.0, 0, 1, 0])
    expected = np.column_stack([bmi, male, other, bmi * male, bmi * other,
                                np.log([10.0, 20.0, 30.0, 40.0])])
    x, y = design_rows(spec, rows())
    assert x is not None and x.dtype == np.float64
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_array_equal(y, [0.5, 1.0, -1.0, 2.0])


def test_design_rows_are_the_same_for_any_batching_and_without_the_target() -> None:
    spec = named_spec(INTERACTION)
    table = rows()
    split = pa.Table.from_batches(table.to_batches(max_chunksize=3))
    assert split.column("bmi").num_chunks == 2
    x, _ = design_rows(spec, table)
    x_split, _ = design_rows(spec, split)
    np.testing.assert_array_equal(x, x_split)
    x_query, y_query = design_rows(spec, table.drop_columns(["target"]), target=False)
    np.testing.assert_array_equal(x_query, x)
    assert y_query is None


def test_an_intercept_only_comparison_has_no_x() -> None:
    spec = named_spec("target ~ 1")
    assert (spec.x_dim, spec.design, spec.variables) == (0, [], [])
    x, y = design_rows(spec, rows())
    assert x is None
    np.testing.assert_array_equal(y, [0.5, 1.0, -1.0, 2.0])


def test_a_removed_models_columns_are_still_made() -> None:
    spec = named_spec("target ~ bmi", "target ~ np.sqrt(bp)")
    kept = spec.model_copy(update={"models": spec.models[:1]})
    x, _ = design_rows(kept, rows())
    np.testing.assert_array_equal(x, np.column_stack([[1.5, -2.0, 0.25, 4.0],
                                                      np.sqrt([10.0, 20.0, 30.0, 40.0])]))


@pytest.mark.parametrize(("table", "message", "details"), [
    (rows().set_column(2, "sex", pa.array(["m", "f", "y", "m"])),
     "column 'sex', row 2 (from 0): 'y' is not a declared level of 'sex' (levels ['f', 'm', "
     "'x'])", {"column": "sex", "row": 2, "value": "y"}),
    (rows().drop_columns(["bmi"]),
     "column 'bmi' is missing: this comparison's rows carry bmi, sex, target",
     {"column": "bmi", "row": None, "value": None}),
    (rows().set_column(3, "target", pa.array(["0.5", "1", "high", "2"])),
     "column 'target', row 2 (from 0): 'high' is not a number",
     {"column": "target", "row": 2, "value": "high"}),
    (rows().set_column(0, "bmi", pa.array([1.0, None, 2.0, 3.0])),
     "column 'bmi', row 1 (from 0): a value is missing", {"column": "bmi", "row": 1,
                                                          "value": None}),
    (rows().set_column(0, "bmi", pa.array([1.0, 2.0, float("nan"), 3.0])),
     "column 'bmi', row 2 (from 0): nan is not a finite number within ±1e+100",
     {"column": "bmi", "row": 2, "value": "nan"}),
    (rows().set_column(0, "bmi", pa.array([True, False, True, True])),
     "column 'bmi', row 0 (from 0): True is not a number",
     {"column": "bmi", "row": 0, "value": True}),
])
def test_named_data_that_cannot_make_rows_names_column_row_and_value(
        table: pa.Table, message: str, details: dict[str, object]) -> None:
    with pytest.raises(NamedDataError) as refused:
        design_rows(named_spec(INTERACTION), table)
    assert (str(refused.value), refused.value.details) == (message, details)


def test_a_design_value_out_of_range_names_the_design_column() -> None:
    table = rows().set_column(1, "bp", pa.array([10, 0, 30, 40]))
    with pytest.raises(NamedDataError) as refused:
        design_rows(named_spec("target ~ np.log(bp)"), table)
    assert str(refused.value) == ("column 'np.log(bp)', row 1 (from 0): -inf is not a finite "
                                  "number within ±1e+100")
    assert refused.value.details == {"column": "np.log(bp)", "row": 1, "value": "-inf"}


STATEFUL = ("its value depends on the data seen, so chunks would be coded differently; write "
            "the constant yourself, e.g. I(bmi - 26.4)")
INTERCEPT = ("removes the intercept: the intercept is the model's own bias, which the family "
             "always has, and it fixes how categories are coded (against the first declared "
             "level); leave out '- 1', '+ 0' and '0 +'")


@pytest.mark.parametrize(("formula", "reason"), [
    ("target ~ bmi +", "formula 'target ~ bmi +': Operator `+` has insuffient arguments and/or "
                       "is misplaced."),
    ("target ~ (bmi", "formula 'target ~ (bmi': Could not find matching context marker."),
    ("target ~ bmi - 1", f"formula 'target ~ bmi - 1' {INTERCEPT}"),
    ("target ~ 0 + bmi", f"formula 'target ~ 0 + bmi' {INTERCEPT}"),
    ("target ~ bmi + 0", f"formula 'target ~ bmi + 0' {INTERCEPT}"),
    ("target ~ C(sex)", "formula 'target ~ C(sex)': declare the levels of 'sex': "
                        "C(sex, levels=[...])"),
    ("target ~ center(bmi)", f"formula 'target ~ center(bmi)': center() is refused: {STATEFUL}"),
    ("target ~ scale(bmi)", f"formula 'target ~ scale(bmi)': scale() is refused: {STATEFUL}"),
    ("target ~ poly(bmi, 2)", f"formula 'target ~ poly(bmi, 2)': poly() is refused: {STATEFUL}"),
    ("target ~ bs(bmi)", f"formula 'target ~ bs(bmi)': bs() is refused: {STATEFUL}"),
    ("target ~ lag(bmi)", "formula 'target ~ lag(bmi)': lag() is refused: its value is the "
                          "previous row's, which an earlier chunk holds"),
    ("target ~ I(__import__('os').getpid())", "formula \"target ~ I(__import__('os').getpid())"
     "\": unknown function __import__('os').getpid(); the functions are I, exp, exp2, log, "
     "log10, log2 and np.<name> for abs, absolute, arccos, arcsin, arcsinh, arctan, arctanh, "
     "cbrt, ceil, clip, cos, cosh, exp, exp2, expm1, floor, log, log10, log1p, log2, maximum, "
     "minimum, power, reciprocal, rint, round, sign, sin, sinh, sqrt, square, tan, tanh"),
    ("target ~ I(bmi.real)", "formula 'target ~ I(bmi.real)': 'bmi.real' is not allowed in "
     "'I(bmi.real)' (numbers, columns, arithmetic and the functions of docs/guide/formulas.md "
     "only)"),
    ("target ~ target + bmi", "formula 'target ~ target + bmi': the right side reads the target "
                              "'target'"),
    ("np.log(target) ~ bmi", "formula 'np.log(target) ~ bmi': the left side names the target "
                             "column, as it is, e.g. 'target ~ bmi'"),
    ("target ~ bmi | bp", "formula 'target ~ bmi | bp': one right side only (no '|' parts)"),
    ("target ~ .", "formula 'target ~ .': name the columns; '.' (every other column) would make "
                   "the design depend on the data"),
    ("target ~ bmi + C(bmi, levels=[1, 2])", "formula 'target ~ bmi + C(bmi, levels=[1, 2])': "
     "'bmi' is read as numbers and as categories [1, 2]; a column is read one way"),
    ("target ~ C(sex, levels=[1, 1])", "formula 'target ~ C(sex, levels=[1, 1])': the levels of "
     "'sex' are a list of distinct numbers or strings, e.g. C(sex, levels=[1, 2])"),
    ("target ~ bmi**17", "formula 'target ~ bmi**17': powers go up to 16, got 17"),
    ("target ~ (" + " + ".join(f"x{i}" for i in range(40)) + ")**4",
     "expands to up to 102,092 terms; a model reads at most 1,000 design columns"),
    ("target ~ (" + " + ".join(f"x{i}" for i in range(20)) + ")**3",
     "makes 1,350 design columns; a model reads at most 1,000"),
    ("target ~ " + "x" * 992, "a formula has at most 1,000 characters, got 1,001"),
])
def test_refused_formulas_say_why(formula: str, reason: str) -> None:
    with pytest.raises(FormulaError) as refused:
        compile_formula(formula)
    assert str(refused.value).endswith(reason)


def test_compiled_formula_reads_backticked_names_and_numpy_functions() -> None:
    compiled = compile_formula("~ np.log(`blood pressure`) + I(bmi ** 2) + log(bmi)")
    assert compiled.target is None
    assert compiled.variables == ["blood pressure", "bmi"]
    assert compiled.columns == ["np.log(`blood pressure`)", "I(bmi ** 2)", "log(bmi)"]
    assert compiled is compile_formula("~ np.log(`blood pressure`) + I(bmi ** 2) + log(bmi)")


def test_a_comparisons_formulas_agree_on_the_target_and_the_levels() -> None:
    with pytest.raises(FormulaError) as targets:
        joint_design(["y ~ a", "z ~ a"])
    assert str(targets.value) == ("the models' formulas name different targets: 'y', 'z'; a "
                                  "comparison has one")
    with pytest.raises(FormulaError) as levels:
        joint_design(["y ~ C(g, levels=[1, 2])", "y ~ C(g, levels=[1, 2, 3])"])
    assert str(levels.value) == ("the models read 'g' as categories [1, 2] and as categories "
                                 "[1, 2, 3]; every model reads a column one way (the same "
                                 "levels)")


def test_a_model_added_later_reads_only_stored_columns() -> None:
    spec = named_spec(INTERACTION)
    check_stored("target ~ bmi:C(sex, levels=['f', 'm', 'x']) + bmi", spec)
    with pytest.raises(FormulaError) as refused:
        check_stored("target ~ bmi + bp + I(bmi ** 2)", spec)
    assert str(refused.value) == (
        "formula 'target ~ bmi + bp + I(bmi ** 2)' reads 'bp', 'I(bmi ** 2)', never "
        "stored: this comparison stores bmi, C(sex, levels=['f', 'm', 'x'])[T.m], "
        "C(sex, levels=['f', 'm', 'x'])[T.x], bmi:C(sex, levels=['f', 'm', 'x'])[T.m], "
        "bmi:C(sex, levels=['f', 'm', 'x'])[T.x] (its design is fixed when it is created)")
