"""The example plugin package (examples/modelcompare-example-models/) as the tests install it:
with pip, into a folder of its own, which a process has on its path or not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "examples" / "modelcompare-example-models"
DISTRIBUTION = "modelcompare-example-models"
VERSION = "1.0.0"
MODULE = "modelcompare_example_models"
FAMILIES = ("negative_binomial_regression", "student_t_regression")


def install(folder: Path) -> Path:
    """``pip install --no-deps --target`` of the plugin under ``folder``: the site folder, holding
    the package and its .dist-info (whose entry points make the families known)."""
    # setuptools builds beside the sources (build/, *.egg-info): build a copy, so that the
    # checkout stays clean and parallel test processes do not share a build folder.
    source = folder / "source"
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    site = folder / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
         "--target", str(site), str(source)],
        capture_output=True, text=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    entry_points = site / f"{MODULE}-{VERSION}.dist-info" / "entry_points.txt"
    assert entry_points.is_file(), sorted(p.name for p in site.iterdir())
    return site


def with_plugin(env: dict[str, str], site: Path) -> dict[str, str]:
    """``env`` with the plugin's site folder first on PYTHONPATH."""
    paths = [str(site), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}
