"""One import package: everything installs under ``modelcompare``, whose sub-packages are the
repository's top-level folders models/, estimators/ and service/ (pyproject.toml maps them), so
a folder with its own ``models.py``, ``service/`` or ``estimators/`` cannot shadow them."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = ("models", "estimators", "service")


def test_every_package_installs_under_modelcompare() -> None:
    """The packages pyproject.toml lists are exactly ``modelcompare`` and every folder with an
    ``__init__.py`` under the three mapped ones (a new sub-package must be listed, or a
    non-editable install leaves it out)."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {f"modelcompare.{f}": f for f in FOLDERS}
    found = {"modelcompare"} | {
        "modelcompare." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == found
    assert PYPROJECT["project"]["scripts"] == {"modelcompare": "modelcompare.service.cli:main"}


def test_short_names_load_lazily() -> None:
    """``import modelcompare`` loads neither torch nor the service; the short names do."""
    code = ("import sys, modelcompare; assert 'torch' not in sys.modules, 'torch'; "
            "assert 'modelcompare.service' not in sys.modules; "
            "from modelcompare import Client, OnlineEvidence; "
            "from modelcompare.service.client import Client as C; assert Client is C; "
            "from modelcompare.estimators import OnlineEvidence as O; assert OnlineEvidence is O")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_folder_of_its_own_models_and_service_shadows_nothing(tmp_path: Path) -> None:
    """From a folder holding a ``models.py`` and ``service/``/``estimators/`` packages of its
    own, the library, the client and the CLI still load modelcompare's."""
    (tmp_path / "models.py").write_text("raise ImportError('own models.py')\n")
    for folder in ("service", "estimators"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(f"raise ImportError('own {folder}')\n")
    code = ("import modelcompare; from modelcompare import OnlineEvidence; "
            "from modelcompare.models import LinearRegression; "
            "from modelcompare.service.client import Client; "
            "import modelcompare.service.cli")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    script = Path(sys.executable).with_name("modelcompare")  # the console script, if installed
    for command in ([sys.executable, "-m", "modelcompare"], [str(script)]):
        if command[0] == str(script) and not script.is_file():
            continue
        cli = subprocess.run([*command, "--help"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.startswith("usage: modelcompare")
