"""A real headless browser for the status page: Playwright driving the system chromium.

The browser is the Debian package ``chromium`` (``tests/run.sh`` installs it as root);
Playwright's own browser download (``playwright install``) is never used. Chromium runs
with ``--no-sandbox`` since CI runs as root. Test files take a ``browser`` parameter: the
fixture is registered by ``pytest_plugins`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.services import missing

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path(os.environ.get("AUTOSCALER_TEST_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless chromium for the session; each test opens its own context (cookies)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        missing("playwright is not installed: pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        missing(f"{CHROMIUM} not found: apt-get install chromium")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--no-sandbox"]
            )
        except Error as e:
            missing(f"chromium did not start: {e}")
        try:
            yield chromium
        finally:
            chromium.close()
