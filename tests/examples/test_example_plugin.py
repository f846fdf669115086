"""The example plugin package: its own tests pass against it installed as pip installs it, and
modelcompare's registry, in this process, knows its families with its package and version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from example_plugin import DISTRIBUTION, FAMILIES, SOURCE, VERSION, with_plugin

from modelcompare.models import build_model, families


def run_plugin_tests(site: Path, markers: str) -> subprocess.CompletedProcess[str]:
    """pytest on the plugin's tests/ as its author runs them (its own pyproject's settings, none
    of this run's PYTEST_ variables), the plugin installed at ``site``; one torch thread, as
    tests/conftest.py gives ours."""
    own = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env = with_plugin({**own, "OMP_NUM_THREADS": "1"}, site)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", markers],
        cwd=SOURCE, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_plugins_own_tests_pass(plugin_site: Path) -> None:
    done = run_plugin_tests(plugin_site, "not slow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout.splitlines()[-1] and "skipped" not in done.stdout


@pytest.mark.slow
def test_the_plugins_families_pass_the_conformance_checks(plugin_site: Path) -> None:
    done = run_plugin_tests(plugin_site, "slow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("4 passed")


def test_the_registry_lists_the_plugins_families(plugin_imported: Path) -> None:
    known = families()
    assert known.broken == {}
    for name in FAMILIES:
        family = known.get(name)
        public = family.public()
        assert (public["package"], public["version"]) == (DISTRIBUTION, VERSION)
        assert public["config_schema"] == family.model.Config.model_json_schema()
        assert public["description"]  # the class docstring's first paragraph
    assert known.get("linear_regression").package == "modelcompare"
    model = build_model("student_t_regression", dim=2, dof=10.0)
    assert model.config() == {"dim": 2, "dof": 10.0, "prior_std": 1.0, "noise_scale": 1.0}
    assert model.param_dim == 4


def test_without_it_the_families_are_unknown() -> None:
    assert not set(FAMILIES) & set(families().known)
