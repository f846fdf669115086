"""Fixtures of the API tests that drive a browser: headless Chromium (Playwright), installed
with apt-get when missing; screenshots go to ARTIFACTS."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"


def _apt_install() -> str | None:
    """Install Debian's chromium; the error text when that is impossible."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if shutil.which("apt-get") is None or (sudo and shutil.which("sudo") is None):
        return "apt-get (as root or with sudo) is not available"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run([*sudo, *command], capture_output=True, text=True, env=env,
                              timeout=900, check=False)
        if done.returncode == 0 and CHROMIUM.exists():
            return None
    return f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists() and (problem := _apt_install()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chromium is needed for the dashboard tests: {problem}")
        pytest.skip(f"no chromium: {problem}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def artifacts() -> Path:
    """The folder for screenshots (test-artifacts/ at the repository root)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
