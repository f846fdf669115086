"""``modelcompare check-model``: the example model passes (exit 0); a broken model fails with
the check and its reason (exit 1); rows from a file; bad arguments are one line on stderr and
exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from modelcompare.service.cli import main

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent


def check_model(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``modelcompare check-model`` with ``argv``."""
    try:
        main(["check-model", *argv])
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(autouse=True)
def own_import_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """check-model puts the current folder on sys.path; give it back after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.mark.slow
def test_the_example_passes(monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT / "examples" / "modelcompare-example-models" / "src")
    status, out, err = check_model(
        ["modelcompare_example_models.student_t:StudentTRegression", "--config", '{"dim": 1}'],
        capsys)
    lines = out.splitlines()
    assert status == 0, out + err
    assert all(line.startswith("PASS  ") for line in lines[:-1])
    assert lines[-1] == "14 passed, 0 failed, 0 skipped"


def test_a_broken_model_fails_with_its_reason(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(TESTS / "models"))
    status, out, _ = check_model(["broken_models:WrongPredictShape", "--config", '{"dim": 2}'],
                                 capsys)
    assert status == 1
    assert ("FAIL  predict: predict(θ, log_weights, x).mean has shape (4, 64); expected (64,)"
            in out)
    assert out.splitlines()[-1] == "13 passed, 1 failed, 0 skipped"


def write_rows(path: Path, labels: np.ndarray) -> None:
    x = np.linspace(-1.0, 1.0, labels.shape[0])
    path.write_text("x1,y\n" + "".join(f"{a},{b}\n" for a, b in zip(x, labels, strict=True)))


@pytest.mark.slow
def test_rows_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.csv"
    write_rows(data, np.arange(80) % 2)
    status, out, err = check_model(
        ["modelcompare.models:LogisticRegression", "--config", '{"dim": 1}', "--data", str(data),
         "--x-cols", "x1", "--y-col", "y"], capsys)
    assert status == 0, out + err
    assert "PASS  data: the first 64 rows given" in out


def test_rows_the_model_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.csv"
    write_rows(data, np.arange(8) % 3)
    status, out, _ = check_model(
        ["modelcompare.models:LogisticRegression", "--config", '{"dim": 1}', "--data", str(data),
         "--x-cols", "x1", "--y-col", "y"], capsys)
    assert status == 1
    assert "FAIL  data: validate_data refused the rows given: logistic_regression needs " \
           "integer labels in [0, 2)" in out
    assert "SKIP  evidence: needs likelihood shapes to pass" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["no_such_module_here:Model"],
     "cannot import 'no_such_module_here': ModuleNotFoundError: No module named "
     "'no_such_module_here'"),
    (["modelcompare.models:NoSuchModel"], "'modelcompare.models' has no class 'NoSuchModel'"),
    (["modelcompare.models.LinearRegression"],
     "'modelcompare.models.LinearRegression' is not MODULE:CLASS"),
    (["modelcompare.models:LinearRegression", "--config", "{dim: 2}"], "--config is not JSON"),
    (["modelcompare.models:LinearRegression", "--config", "[2]"], "--config must be a JSON object"),
    (["modelcompare.models:LinearRegression", "--data", "missing.csv"],
     "no such file: missing.csv"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = check_model(argv, capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"modelcompare check-model: error: {message}")
