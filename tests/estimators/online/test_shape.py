"""The shape of the online engine, kept from regressing: short functions, a core piece kernel
that names none of its extensions, each extension in a module of its own of at most 150 lines,
and a core state of at most six fields (docs/design/kernel.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from modelcompare.estimators.online import kernel
from modelcompare.estimators.online.state import ParticleState

ONLINE = Path(kernel.__file__).parent
EXTENSIONS = ("careful", "surprise", "reestimate", "islands", "standard_error")
# what the core must not name: the extensions' modules, settings and state slots
EXTENSION_WORDS = ("careful", "surprise", "reestimat", "restart", "island", "genealogy", "eves",
                   "widen", "narrow")
MAX_FUNCTION_LINES, MAX_EXTENSION_LINES, MAX_CORE_FIELDS = 60, 150, 6


def functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [
        (f"{path.name}:{node.name}", node.end_lineno - node.lineno + 1)  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_no_function_in_the_online_package_is_over_60_lines() -> None:
    found = [f for path in sorted(ONLINE.glob("*.py")) for f in functions(path)]
    assert found
    assert [f for f in found if f[1] > MAX_FUNCTION_LINES] == []


def test_each_extension_is_a_module_of_at_most_150_lines() -> None:
    lengths = {name: len((ONLINE / f"{name}.py").read_text().splitlines()) for name in EXTENSIONS}
    assert {name: n for name, n in lengths.items() if n > MAX_EXTENSION_LINES} == {}


def test_the_core_kernel_names_no_extension() -> None:
    """Neither the piece kernel nor the anchor it re-sets imports or mentions an extension, in
    code or prose."""
    for module in ("kernel.py", "anchor.py"):
        text = (ONLINE / module).read_text().lower()
        assert [word for word in EXTENSION_WORDS if word in text] == [], module


def test_the_core_state_has_at_most_six_fields_and_every_other_is_a_slot() -> None:
    core = [name for name in ParticleState._fields if name not in ParticleState._field_defaults]
    assert len(core) <= MAX_CORE_FIELDS
    slots = [ParticleState._field_defaults[name] for name in ParticleState._fields
             if name in ParticleState._field_defaults]
    assert slots and all(hasattr(slot, "_fields") for slot in slots)
