"""Checks every generated report must pass: figures carry a title, axis labels and a legend (checked on the
matplotlib figure as it is saved), and the HTML page loads in headless Chromium without console errors,
with every table inside 1,280 px. Screenshots go to $ELASTISCHED_SCREENSHOTS (default results/screenshots).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

WIDTH = 1280
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def figure_problems(fig: object) -> list[str]:
    """What a saved figure lacks: per Axes with data, a title, x and y labels, and a legend."""
    out = []
    for i, ax in enumerate(fig.axes):  # type: ignore[attr-defined]
        has_data = bool(ax.lines or ax.patches or ax.collections or ax.images)
        if not has_data or not ax.get_visible():
            continue
        name = ax.get_title() or f"axes {i}"
        if not ax.get_title():
            out.append(f"{name}: no title")
        if not ax.get_xlabel():
            out.append(f"{name}: no x label")
        if not ax.get_ylabel():
            out.append(f"{name}: no y label")
        if ax.get_legend() is None and not any(a.get_legend() is not None for a in fig.axes):  # type: ignore[attr-defined]
            out.append(f"{name}: no legend")
    return out


@contextmanager
def checked_figures() -> Iterator[list[str]]:
    """Record the problems of every figure saved inside the block (matplotlib's savefig is wrapped)."""
    from matplotlib.figure import Figure

    problems: list[str] = []
    real = Figure.savefig

    def savefig(self: Figure, *a: object, **k: object) -> object:
        title = self._suptitle.get_text() if self._suptitle is not None else ""  # type: ignore[attr-defined]
        problems.extend(f"{title or 'figure'} / {p}" for p in figure_problems(self))
        return real(self, *a, **k)

    Figure.savefig = savefig  # type: ignore[method-assign]
    try:
        yield problems
    finally:
        Figure.savefig = real  # type: ignore[method-assign]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        msg = "chromium not installed (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def check_page(html_file: Path, name: str) -> None:
    """Load the page in headless Chromium: no console errors or page errors, every table fits the width,
    every image loaded; a full-page screenshot is written."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed (dev extra)")
        pytest.skip("playwright is not installed")
    exe = chromium()
    shots = Path(os.environ.get("ELASTISCHED_SCREENSHOTS", "results/screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html_file.resolve().as_uri())
            page.wait_for_load_state("load")
            wide = page.evaluate(f"""() => [...document.querySelectorAll('table')]
                .map(t => t.getBoundingClientRect().right).filter(r => r > {WIDTH})""")
            broken = page.evaluate("() => [...document.images].filter(i => !i.complete || !i.naturalWidth).length")
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, f"{name}: console errors {errors}"
    assert not wide, f"{name}: a table is wider than {WIDTH} px (right edges {wide})"
    assert broken == 0, f"{name}: {broken} images did not load"
