"""Headless Chromium for the tests that drive the dashboard (Playwright), installed with
Debian's apt-get where it is missing; under CI=true a missing browser fails those tests."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Chromium launched headless; skips the test (fails it under CI=true) when it cannot be
    installed."""
    if not CHROMIUM.exists() and (problem := _apt_install()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chromium is needed for the dashboard tests: {problem}")
        pytest.skip(f"no chromium: {problem}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
