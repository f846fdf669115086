"""Which Python a formula's factors may hold, and the input columns they read.

formulaic evaluates a factor such as ``np.log(bmi)`` with Python's ``eval``: only numbers,
columns, arithmetic and the stateless functions below reach it, so a formula can neither run
other code nor depend on the data seen (a design must be a function of the formula's text).
"""

from __future__ import annotations

import ast
import math
from typing import Any

import formulaic
from formulaic.errors import FormulaicError
from formulaic.parser import DefaultFormulaParser
from formulaic.parser.types import ASTNode, Factor, Token
from formulaic.transforms import TRANSFORMS
from formulaic.utils.code import sanitize_variable_names

from modelcompare.models.config import MAX_INPUT_DIM

Level = int | float | str

# Stateless functions a factor may call: formulaic's numpy aliases and np.<name> element-wise
# functions. Anything else is refused: formulaic evaluates factors with Python's eval, so a
# function not listed here (``__import__``, ``open``) must never reach it.
FUNCTIONS = frozenset({"I", "log", "log2", "log10", "exp", "exp2"})
NUMPY_FUNCTIONS = frozenset({
    "abs", "absolute", "arccos", "arcsin", "arctan", "arcsinh", "arctanh", "cbrt", "ceil",
    "clip", "cos", "cosh", "exp", "exp2", "expm1", "floor", "log", "log1p", "log2", "log10",
    "maximum", "minimum", "power", "reciprocal", "rint", "round", "sign", "sin", "sinh", "sqrt",
    "square", "tan", "tanh",
})
DATA_DEPENDENT = ("its value depends on the data seen, so chunks would be coded differently; "
                  "write the constant yourself, e.g. I(bmi - 26.4)")
REFUSED_FUNCTIONS = {
    # formulaic marks its stateful transforms (center, scale, standardize, poly, bs, cr, cs, cc)
    **{name: DATA_DEPENDENT for name, function in TRANSFORMS.items()
       if getattr(function, "__is_stateful_transform__", False)},
    "lag": "its value is the previous row's, which an earlier chunk holds",
    "hashed": "its categories are whatever values the data holds; declare them with "
              "C(column, levels=[...])",
    "Q": "quote a column name with backticks instead: `my column`",
}
ALLOWED_NODES = (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load,
                 ast.operator, ast.unaryop)

# formulaic expands products and powers of sums into every term before anything can count
# columns: (a1 + … + a40)**4 is 102,090 terms and 15 s of parsing. An upper bound on the terms,
# from the parse tree, refuses such a formula first; at twice the columns a model may read,
# what passes compiles in under 0.4 s (a 10-way a*b*…: 1,023 terms, 0.2 s).
MAX_TERMS_BOUND = 2 * MAX_INPUT_DIM
MAX_POWER = 16


class FormulaError(ValueError):
    """A formula the service refuses, with the reason."""


def first_line(exc: BaseException) -> str:
    # formulaic's syntax errors go on with the formula marked up in terminal colours
    return str(exc).strip().split("\n")[0]


def check_expansion(text: str) -> None:
    """``FormulaError`` for a formula whose terms could exceed ``MAX_TERMS_BOUND`` or that uses
    '.' (every other column: a design from the data, not the text)."""
    try:
        tree = DefaultFormulaParser().get_ast(text)
    except (FormulaicError, SyntaxError, ValueError) as exc:
        raise FormulaError(f"formula {text!r}: {first_line(exc)}") from None
    bound = _terms_bound(text, tree)
    if bound > MAX_TERMS_BOUND:
        raise FormulaError(f"formula {text!r} expands to up to {bound:,} terms; a model reads "
                           f"at most {MAX_INPUT_DIM:,} design columns")


def _terms_bound(text: str, node: ASTNode | Token | None) -> int:
    if not isinstance(node, ASTNode):
        return 1
    symbol = node.operator.symbol
    if symbol == ".":
        raise FormulaError(f"formula {text!r}: name the columns; '.' (every other column) "
                           "would make the design depend on the data")
    if symbol in ("**", "^"):  # every product of up to `power` distinct terms of the base
        base, exponent = node.args
        terms = _terms_bound(text, base)
        power = int(str(exponent)) if str(exponent).isdigit() else 1
        if power > MAX_POWER:  # formulaic multiplies the base out `power` times
            raise FormulaError(f"formula {text!r}: powers go up to {MAX_POWER}, got {power}")
        return sum(math.comb(terms, k) for k in range(1, min(power, terms) + 1))
    bounds = [_terms_bound(text, arg) for arg in node.args]
    if symbol in ("+", "-", "|", "~"):
        return sum(bounds)
    if symbol in (":", "in"):
        return math.prod(bounds)
    return math.prod(bound + 1 for bound in bounds) - 1  # a * b: a, b and a:b


def read_terms(text: str, rhs: formulaic.SimpleFormula) -> tuple[list[str], dict[str, list[Level]]]:
    """The input columns the terms of ``rhs`` read, first seen over its terms, and those read
    as categories with their declared levels; ``FormulaError`` for a factor outside the
    stateless subset."""
    variables: list[str] = []
    levels: dict[str, list[Level]] = {}
    for term in rhs:
        for factor in term.factors:
            _read_factor(text, factor, variables, levels)
    return variables, levels


def target_of(text: str, lhs: formulaic.SimpleFormula | None) -> str | None:
    if lhs is None:
        return None
    factors = [factor for term in lhs for factor in term.factors]
    if len(factors) != 1 or factors[0].eval_method is not Factor.EvalMethod.LOOKUP:
        raise FormulaError(f"formula {text!r}: the left side names the target column, as it "
                           "is, e.g. 'target ~ bmi'")
    return str(factors[0].expr)


def _read_factor(text: str, factor: Factor, variables: list[str],
                 levels: dict[str, list[Level]]) -> None:
    """Add the input columns ``factor`` reads to ``variables`` (categories to ``levels``), or
    ``FormulaError`` for a factor outside the stateless Python subset."""
    if factor.eval_method is Factor.EvalMethod.LITERAL:
        return
    if factor.eval_method is Factor.EvalMethod.LOOKUP:
        _add(text, str(factor.expr), variables, levels, None)
        return
    aliases: dict[str, str] = {}
    code = ast.parse(sanitize_variable_names(str(factor.expr), {}, aliases), mode="eval").body
    if isinstance(code, ast.Call) and isinstance(code.func, ast.Name) and code.func.id == "C":
        name, declared = _categorical(text, code, aliases)
        _add(text, name, variables, levels, declared)
        return
    for node in ast.walk(code):
        if isinstance(node, ast.Call):
            _check_call(text, node)
        elif isinstance(node, ast.Name) and not _is_function(node, code):
            _add(text, aliases.get(node.id, node.id), variables, levels, None)
        elif isinstance(node, ast.Attribute) and _is_function(node, code):
            continue  # np.<name>, checked with its call
        elif not isinstance(node, ALLOWED_NODES) or (
                isinstance(node, ast.Constant) and not _is_number(node.value)):
            raise FormulaError(f"formula {text!r}: {ast.unparse(node)!r} is not allowed in "
                               f"{factor.expr!r} (numbers, columns, arithmetic and the "
                               "functions of docs/guide/formulas.md only)")


def _categorical(text: str, call: ast.Call, aliases: dict[str, str]) -> tuple[str, list[Level]]:
    if len(call.args) != 1 or not isinstance(call.args[0], ast.Name) or any(
            keyword.arg != "levels" for keyword in call.keywords):
        raise FormulaError(f"formula {text!r}: C() takes a column and its levels: "
                           "C(sex, levels=[1, 2])")
    name = aliases.get(call.args[0].id, call.args[0].id)
    if not call.keywords:
        raise FormulaError(f"formula {text!r}: declare the levels of {name!r}: "
                           f"C({name}, levels=[...])")
    try:
        declared = ast.literal_eval(call.keywords[0].value)
    except ValueError:
        declared = None
    if (not isinstance(declared, list | tuple) or not declared
            or not all(_is_number(v) or isinstance(v, str) for v in declared)
            or len(set(declared)) != len(declared)):
        raise FormulaError(f"formula {text!r}: the levels of {name!r} are a list of distinct "
                           "numbers or strings, e.g. C(sex, levels=[1, 2])")
    return name, list(declared)


def _check_call(text: str, call: ast.Call) -> None:
    name = _refused_name(call.func)
    if name in REFUSED_FUNCTIONS:
        raise FormulaError(f"formula {text!r}: {name}() is refused: {REFUSED_FUNCTIONS[name]}")
    if name == "C":
        raise FormulaError(f"formula {text!r}: C(...) is a factor of its own, as in "
                           "'bmi:C(sex, levels=[1, 2])', not inside another function")
    if name is not None:
        raise FormulaError(f"formula {text!r}: unknown function {name}(); the functions are "
                           f"I, {', '.join(sorted(FUNCTIONS - {'I'}))} and np.<name> for "
                           f"{', '.join(sorted(NUMPY_FUNCTIONS))}")
    if call.keywords:
        raise FormulaError(f"formula {text!r}: {ast.unparse(call)!r}: functions take "
                           "positional arguments only")


def _refused_name(function: ast.expr) -> str | None:
    """None for a function of FUNCTIONS or np.<NUMPY_FUNCTIONS>, else its name as written."""
    if isinstance(function, ast.Name) and function.id in FUNCTIONS:
        return None
    if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
            and function.value.id == "np" and function.attr in NUMPY_FUNCTIONS):
        return None
    return ast.unparse(function)


def _is_function(node: ast.expr, code: ast.expr) -> bool:
    """Whether ``node`` is a called function (or ``np`` of ``np.log``), not a column."""
    return any((isinstance(parent, ast.Call) and parent.func is node)
               or (isinstance(parent, ast.Attribute) and parent.value is node
                   and _is_function(parent, code)) for parent in ast.walk(code))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _add(text: str, name: str, variables: list[str], levels: dict[str, list[Level]],
         declared: list[Level] | None) -> None:
    if name in variables and levels.get(name) != declared:
        raise FormulaError(f"formula {text!r}: {name!r} is read as {reading(levels.get(name))} "
                           f"and as {reading(declared)}; a column is read one way")
    if name not in variables:
        variables.append(name)
        if declared is not None:
            levels[name] = declared


def reading(declared: list[Level] | None) -> str:
    """How a column is read: as numbers, or as categories with the declared levels."""
    return "numbers" if declared is None else f"categories {declared}"


