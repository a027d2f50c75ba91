"""Helpers of the view tests (screenshots, waits, the tests' own reference numbers)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import numpy as np

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "views"
THUMB_ALPHA = """c => {
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  return Array.from(px.filter((_, k) => k % 4 === 3)); }"""


def is_local(url: str) -> bool:
    """A file: URL, or http(s) to 127.0.0.1 / localhost: no request leaves the machine."""
    u = urllib.parse.urlsplit(url)
    return u.scheme == "file" or (
        u.scheme in ("http", "https") and u.hostname in ("127.0.0.1", "localhost")
    )


def screenshot(page, name: str, full_page: bool = True) -> None:
    """Keep a screenshot as a test artefact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def wait_ready(page, example: int = 0) -> None:
    page.wait_for_selector(f'#jaxattn[data-state="ready"][data-example="{example}"]', timeout=15000)


def norm_weights(cap) -> np.ndarray:
    """‖αf‖ rows normalised, computed here from the capture (the test's own reference)."""
    x = cap.alpha_fx_norm.astype(np.float64)
    return x / x.sum(-1, keepdims=True)
