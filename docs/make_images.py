"""Regenerate the pictures of the views (docs/img/*.png; docs/views.md shows them) with the project.

    .venv/bin/python docs/make_images.py

Captures Vig's example pair once with the embedded all-MiniLM-L6-v2
(`jaxattn capture ... --out`), then runs one `jaxattn view` per static picture
(the commands are printed, and are the ones docs/views.md shows) and one more for
the interactive page (`jaxattn view pair.npz --out page.html`), which headless
Chromium opens to screenshot each HTML view (docs/img/html_*.png) after the
clicks and hovers that `HTML_PICTURES` lists; then the corpus-scale pages: the
global query-key map of 1,000 shipped EWT sentences (html_global.png) and the
pair's attention against its norm-based weights (html_compare.png). Needs Chromium (`apt-get install
chromium`) and, for the HTML pictures, the playwright Python package driving
that system binary (never `playwright install`). The screenshots are re-encoded
smaller without loss (`small_png`).
"""

from __future__ import annotations

import base64
import shlex
import struct
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

from jaxattn.cli import main
from jaxattn.inputs import SAMPLE_CORPUS
from jaxattn.views.png import FLAGS, find_chromium

IMG = Path(__file__).resolve().parent / "img"
PAIR = ("I went to the store.", "At the store, I bought fresh strawberries.")
WHAT = "attention,alpha_fx_norm,queries,keys"
PICTURES = {  # file -> the `jaxattn view` options after the capture file
    "head.png": ["--views", "head", "--layers", "2", "--heads", "0,5,11"],
    "head_norm.png": ["--views", "head", "--layers", "2", "--heads", "0,5,11", "--kind", "norm"],
    "model.png": ["--views", "model"],
    "neuron.png": ["--views", "neuron", "--layers", "2", "--heads", "0", "--token", "5"],
    "stats.png": ["--views", "stats"],
}
# file -> (tab, [(action, selector, value)]) done in that order on the page before the shot:
# the head view with "bought" hovered in layer 0 (its heads disagree: one box per head beside
# each token it attends to), the neuron view filtered to sentence B -> A with B's "store"
# selected (head 4 of layer 2 sends 96% of its attention to sentence A, 64% to A's "store").
HTML_PICTURES = {
    "html_head.png": (
        "head",
        [
            ("select", "#hv-layer", "0"),
            ("hover", 'text.tok[data-side="left"][data-idx="13"]', None),
        ],
    ),
    "html_model.png": ("model", []),
    "html_neuron.png": (
        "neuron",
        [
            ("select", "#nv-layer", "2"),
            ("select", "#nv-head", "4"),
            ("select", "#nv-filter", "BA"),
            ("select", "#nv-token", "10"),
        ],
    ),
    "html_stats.png": ("stats", []),
}
VIEWPORT = {"width": 1180, "height": 900}  # the neuron view's rows need ~1130 px
# The corpus-scale pages: the global map of 1,000 shipped EWT sentences with layer 0's
# head 2 (a ring: a positional head) coloured by position, and the comparison of the
# pair's attention with its norm-based weights, layer 2 head 0.
GLOBAL = ["--limit", "1000", "--quiet"]
GLOBAL_STEPS = [
    ("click", '#qk-grid canvas[data-layer="0"][data-head="2"]', None),
    ("select", "#qk-colour", "position"),
]
COMPARE = ["--compare", "default", "default,kind=norm", "--layers", "2"]
COMPARE_STEPS = [("select", "#cmp-head", "0")]


def run(args: list[str]) -> None:
    print("jaxattn " + shlex.join(args), flush=True)
    if main(args) != 0:
        sys.exit(f"failed: jaxattn {shlex.join(args)}")


# The pixels of a PNG (base64), decoded by the browser itself: [w, h, base64 of RGBA bytes].
PIXELS = """async (b64) => {
  const img = new Image(); img.src = "data:image/png;base64," + b64; await img.decode();
  const c = document.createElement("canvas"); c.width = img.width; c.height = img.height;
  const g = c.getContext("2d"); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  let s = "";
  for (let k = 0; k < d.length; k += 32768) s += String.fromCharCode(...d.subarray(k, k + 32768));
  return [c.width, c.height, btoa(s)]; }"""


def small_png(rgba: np.ndarray) -> bytes:
    """A PNG of [h, w, 4] uint8 pixels, as small as zlib makes it without loss: RGB when
    all are opaque, a palette when there are <= 256 colours, each row's best of the
    None / Sub / Up filters (the least sum of |bytes|, as libpng's heuristic)."""
    h, w, _ = rgba.shape
    px = rgba[..., :3] if (rgba[..., 3] == 255).all() else rgba
    colours, index = np.unique(px.reshape(h * w, -1), axis=0, return_inverse=True)
    plte = b""
    if len(colours) <= 256 and px.shape[2] == 3:
        plte, px = b"PLTE" + colours.astype(np.uint8).tobytes(), index.reshape(h, w, 1)
    n = px.shape[2]
    ctype = {1: 3, 3: 2, 4: 6}[n]
    x = px.reshape(h, w * n).astype(np.int16)
    left = np.pad(x, ((0, 0), (n, 0)))[:, : w * n]
    above = np.pad(x, ((1, 0), (0, 0)))[:h]
    cands = np.stack([x, (x - left) & 255, (x - above) & 255]).astype(np.uint8)  # None, Sub, Up
    cost = np.minimum(cands, 256 - cands.astype(np.int16)).sum(-1)  # |signed byte|
    best = cost.argmin(0) if n > 1 else np.zeros(h, int)  # palette rows: None
    raw = np.hstack([best[:, None].astype(np.uint8), cands[best, np.arange(h)]]).tobytes()

    def chunk(body: bytes) -> bytes:
        return struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = b"IHDR" + struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(ihdr)
        + (chunk(plte) if plte else b"")
        + chunk(b"IDAT" + zlib.compress(raw, 9))
        + chunk(b"IEND")
    )


def screenshot_html(html: Path) -> None:
    """Open the page in headless Chromium and save each of `HTML_PICTURES`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("the HTML pictures need the playwright Python package (pip install playwright)")
    binary = find_chromium()
    if binary is None:
        sys.exit("the pictures need Chromium: apt-get install chromium")
    with sync_playwright() as p:  # a fresh temporary profile per launch
        browser = p.chromium.launch(executable_path=binary, args=list(FLAGS))
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        page.goto(html.as_uri())
        page.wait_for_selector('#jaxattn[data-state="ready"]')
        for name, (tab, steps) in HTML_PICTURES.items():
            page.click(f'.tab[data-view="{tab}"]')
            for action, selector, value in steps:
                if action == "select":
                    page.select_option(selector, value)
                else:
                    getattr(page, action)(selector)
            if tab == "model":
                page.wait_for_function(
                    "() => !document.querySelector('canvas.thumb:not([data-drawn])')"
                )
            shot = page.locator("#jaxattn").screenshot(animations="disabled")
            out = IMG / name
            out.write_bytes(min(small_png(_blank_pixels(browser, shot)), shot, key=len))
            print(f"screenshot of the {tab} view: {out.relative_to(IMG.parent.parent)}")
        browser.close()


def _blank_pixels(browser, shot: bytes) -> np.ndarray:
    """The RGBA pixels of a PNG screenshot, decoded by the browser (`PIXELS`)."""
    blank = browser.new_page()
    w, h, b64 = blank.evaluate(PIXELS, base64.b64encode(shot).decode("ascii"))
    blank.close()
    return np.frombuffer(base64.b64decode(b64), np.uint8).reshape(h, w, 4)


def screenshot_page(html: Path, root: str, steps: list, name: str) -> None:
    """Open a one-view page (--global, --compare), do `steps`, save its root as `name`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=list(FLAGS))
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        page.goto(html.as_uri())
        page.wait_for_selector(f'#{root}[data-state="ready"]', timeout=60000)
        for action, selector, value in steps:
            if action == "select":
                page.select_option(selector, value)
            else:
                getattr(page, action)(selector)
        page.wait_for_timeout(500)  # the selected head's data inflates, then draws
        shot = page.locator(f"#{root}").screenshot(animations="disabled")
        out = IMG / name
        out.write_bytes(min(small_png(_blank_pixels(browser, shot)), shot, key=len))
        print(f"screenshot: {out.relative_to(IMG.parent.parent)}")
        browser.close()


def make() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cap = str(Path(tmp, "pair.npz"))
        run(["capture", *PAIR, "--what", WHAT, "--out", cap])
        for name, options in PICTURES.items():
            run(["view", cap, *options, "--scale", "1", "--out", str(IMG / name), "--overwrite"])
        html = Path(tmp, "page.html")
        run(["view", cap, "--out", str(html)])
        screenshot_html(html)
        qk = Path(tmp, "qk.html")
        run(["view", "--global", str(SAMPLE_CORPUS), *GLOBAL, "--out", str(qk)])
        screenshot_page(qk, "qk", GLOBAL_STEPS, "html_global.png")
        cmp = Path(tmp, "compare.html")
        run(["view", " ||| ".join(PAIR), *COMPARE, "--out", str(cmp)])
        screenshot_page(cmp, "jaxattn", COMPARE_STEPS, "html_compare.png")


if __name__ == "__main__":
    make()
