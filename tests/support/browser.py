"""A real browser for the dashboard's tests: Debian's chromium, driven by Playwright for
Python (which may not download a browser of its own: no network but the package
registries). Where no chromium is installed the tests skip with the reason, except in CI
(`CI` set), where .ci/run installs it and a missing one is a failure."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SHOTS", "chromium_path", "dashboard_page", "open_browser", "shot", "signed_in"]

# Where the tests save their screenshots (the README shows copies from docs/dashboard/).
SHOTS = Path(os.environ.get("ORCH_SCREENSHOTS", "build/screenshots"))
# As root and with no network: no sandbox, and none of chromium's own background calls.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def open_browser() -> Iterator[Any]:
    """A headless chromium (skips, or fails in CI, where there is none)."""
    path = chromium_path()
    if path is None:
        message = "no chromium installed (Debian: apt install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the dev extra has it
        pytest.skip("playwright is not installed (the dev extra has it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def signed_in(browser: Any, h: Any, url: str, *, width: int = 1280, height: int = 900,
              next_path: str = "/ui/runs", timeout: int = 20_000,
              init_script: str | None = None) -> Any:
    """A page of a new context `width` x `height`, signed in to the dashboard at `url`
    with the one-time link `orchestrator dev` prints (for harness `h`'s stack), on
    `next_path`; `init_script` runs in each of its documents first."""
    import re

    from orchestrator.services.access.dashboard_logins import DashboardLogins

    context = browser.new_context(viewport={"width": width, "height": height})
    if init_script is not None:
        context.add_init_script(init_script)
    p = context.new_page()
    p.set_default_timeout(timeout)
    token = DashboardLogins(h.rt.control).create(h.rt.clock())
    p.goto(f"{url}/ui/login?token={token}&next={next_path}")
    p.wait_for_url(re.compile(".*" + re.escape(next_path) + ".*"))
    return p


@contextmanager
def dashboard_page(h: Any, url: str, **how: Any) -> Iterator[Any]:
    """A browser's page signed in to the dashboard at `url` (`signed_in`'s options), for
    a test's fixture: its context closed after."""
    with open_browser() as browser:
        p = signed_in(browser, h, url, **how)
        yield p
        p.context.close()


def shot(p: Any, name: str) -> None:
    """Save the whole page as SHOTS/<name>.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
