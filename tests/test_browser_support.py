"""Browser tests skip on a machine without Chromium or playwright, and fail under CI=true."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from browser_support import chromium_path, sync_playwright


@pytest.fixture
def no_chromium(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLANNER_CHROMIUM", str(tmp_path / "no-such-chromium"))


@pytest.fixture
def no_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes `import playwright.sync_api` raise ImportError.
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)


@pytest.mark.usefixtures("no_chromium")
def test_missing_chromium_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no Chromium"):
        chromium_path()


@pytest.mark.usefixtures("no_chromium")
def test_missing_chromium_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium"):
        chromium_path()


@pytest.mark.usefixtures("no_playwright")
def test_missing_playwright_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="playwright is not installed"):
        sync_playwright()


@pytest.mark.usefixtures("no_playwright")
def test_missing_playwright_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="playwright is not installed"):
        sync_playwright()
