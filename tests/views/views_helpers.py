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


def long_capture(t: int, heads: int = 2, causal: bool = False, norm: bool = False, seed: int = 0):
    """A synthetic one-layer capture of `t` tokens (numpy; no model): softmax rows of
    random scores, head 0 a sink head (token 0), head 1 a previous-token head, the
    others diffuse; a decoder's (`causal`) rows over j <= i. float32; with `norm`,
    an alpha_fx_norm of the weights times random ||f(x_j)||."""
    from jaxattn.capture import Capture

    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(1, heads, t, t)).astype(np.float32)
    idx = np.arange(t)
    scores[:, 0, :, 0] += 6
    if heads > 1:
        scores[:, 1, idx[1:], idx[:-1]] += 7
    if causal:
        scores[..., idx[None, :] > idx[:, None]] = -np.inf
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    tensors = dict(attention=att)
    if norm:
        tensors["alpha_fx_norm"] = att * rng.uniform(0.2, 3.0, size=(1, heads, 1, t)).astype(
            np.float32
        )
    return Capture(
        tokens=tuple(f"tok{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0,),
        heads=tuple(range(heads)),
        dtype="float32",
        tensors=tensors,
        provenance={"causal": causal},
    )


LONG_TOKENS = 1100  # a long decoder text (issue 30: the views at 1,024+ tokens)
