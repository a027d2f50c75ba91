"""PNG export: a static SVG (`jaxattn.views.svg`) rasterised by headless Chromium.

The system browser is used as it is installed (Debian: ``apt-get install
chromium``); nothing is downloaded. Set ``$JAXATTN_CHROMIUM`` to use another
binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from jaxattn.errors import UsageError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

# Flags for a quiet, private, offline browser: no first-run UI, no background
# fetches (component updates, sync, safe browsing), a throw-away profile.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
)


def find_chromium() -> str | None:
    """The Chromium/Chrome binary: ``$JAXATTN_CHROMIUM``, else the first on PATH, else None."""
    env = os.environ.get("JAXATTN_CHROMIUM")
    if env:
        return env
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def svg_size(svg: str) -> tuple[int, int]:
    """(width, height) of an SVG document's root element, in pixels."""
    m = re.search(r'<svg[^>]*\bwidth="([\d.]+)"[^>]*\bheight="([\d.]+)"', svg)
    if not m:
        raise UsageError("the SVG has no pixel width and height on its root")
    return int(float(m.group(1)) + 0.5), int(float(m.group(2)) + 0.5)


def write_png(path, svg: str, *, scale: float = 2.0, timeout: float = 60.0) -> None:
    """Rasterise `svg` to a PNG file at `path` with headless Chromium.

    Args:
      path: the PNG to write.
      svg: a standalone SVG document (as `to_svg` returns).
      scale: device pixels per SVG pixel (2 = sharp in print).
      timeout: seconds to wait for the browser.

    Raises:
      UsageError: `svg` is no SVG text (a Capture: draw it with `to_svg` first).
      RuntimeError: no browser found (with the install hint), or it failed.
    """
    if not isinstance(svg, str):
        raise UsageError(
            f"write_png takes the SVG text of a view (views.to_svg(cap, ...)), got "
            f"{type(svg).__name__}"
        )
    binary = find_chromium()
    if binary is None:
        raise RuntimeError(
            "PNG export needs Chromium: apt-get install chromium (or set $JAXATTN_CHROMIUM "
            "to a Chrome/Chromium binary); SVG export works without it"
        )
    width, height = svg_size(svg)
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="jaxattn-png-") as tmp:
        page = Path(tmp, "view.html")
        page.write_text(
            '<!doctype html><html><head><meta charset="utf-8"><style>html,body{margin:0;'
            f"overflow:hidden}}</style></head><body>{svg}</body></html>",
            encoding="utf-8",
        )
        cmd = [
            binary,
            *FLAGS,
            f"--user-data-dir={tmp}/profile",
            f"--force-device-scale-factor={scale}",
            f"--window-size={width},{height}",
            f"--screenshot={path}",
            page.as_uri(),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{binary} took over {timeout:.0f}s to render the PNG") from None
        if done.returncode != 0 or not path.is_file():
            raise RuntimeError(f"{binary} failed to write {path}: {done.stderr.strip()[-500:]}")
