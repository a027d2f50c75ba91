"""docs/tutorial.ipynb runs top to bottom, and its inline views draw in an exported page.

The notebook is executed with nbclient by a python3 kernel of this interpreter
that imports the jaxattn under test, on the embedded model, in a temporary
working directory. The executed notebook is exported to HTML with nbconvert's
lab template, less the template's own CDN scripts (require.js, MathJax, mermaid:
nbconvert's, not ours), and opened in headless system Chromium: every view
frame must finish loading and put colour on the screen (pixels of a screenshot;
the model view's canvases by their ImageData), two captures' views side by
side must each show their own tokens, and no request may leave the page
(file:, data: and blob: only). Screenshots go to test-artifacts/notebook/.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "notebook"
LOCAL_SCHEMES = ("file:", "data:", "blob:")
# nbconvert's lab template without the scripts it loads from a CDN.
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{% block html_head_js %}{% endblock html_head_js %}
{% block html_head_js_mathjax %}{% endblock html_head_js_mathjax %}
{% block html_head_js_mermaidjs %}{% endblock html_head_js_mermaidjs %}
"""
# Of a PNG: [pixels whose channels spread by more than 60 (coloured, not grey or
# white), the mean brightness of the top 40 rows (0-255)].
PIXELS = """async (b64) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const bmp = await createImageBitmap(new Blob([bytes], { type: "image/png" }));
  const c = new OffscreenCanvas(bmp.width, bmp.height), g = c.getContext("2d");
  g.drawImage(bmp, 0, 0);
  const px = g.getImageData(0, 0, bmp.width, bmp.height).data, top = 40 * bmp.width * 4;
  let coloured = 0, bright = 0;
  for (let k = 0; k < px.length; k += 4) {
    const hi = Math.max(px[k], px[k + 1], px[k + 2]), lo = Math.min(px[k], px[k + 1], px[k + 2]);
    if (hi - lo > 60) coloured++;
    if (k < top) bright += (px[k] + px[k + 1] + px[k + 2]) / 3;
  }
  return [coloured, bright / Math.min(top / 4, px.length / 4)]; }"""
# Per model-view thumbnail: how it was drawn and how many of its pixels are not transparent.
THUMBS = """els => els.map(c => [c.dataset.drawn || '',
  Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)
    .filter((v, k) => k % 4 === 3 && v > 0).length])"""
TOKENS = "els => els.map(e => e.textContent)"


def test_committed_notebook_is_clean_and_valid():
    """Committed without outputs (clean diffs), valid nbformat, a python3 kernel."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code), (
        "commit docs/tutorial.ipynb without outputs (Jupyter: Edit > Clear Outputs of All Cells)"
    )
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= len(code) // 2, "prose between cells"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook run by a kernel of this interpreter, importing this jaxattn."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    import jaxattn

    tmp = tmp_path_factory.mktemp("tutorial")
    spec = tmp / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "jaxattn tests", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    source = str(Path(jaxattn.__file__).resolve().parents[1])
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": str(tmp)}}
    )
    with pytest.MonkeyPatch.context() as mp:  # the kernel inherits the environment
        mp.setenv("JUPYTER_PATH", str(tmp / "jupyter"), prepend=os.pathsep)
        mp.setenv("PYTHONPATH", source, prepend=os.pathsep)
        client.execute()
    return nb, tmp


def outputs(nb, kind: str) -> list[str]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if kind == "stdout" and out.get("name") == "stdout":
                found.append(out["text"])
            elif kind in out.get("data", {}):
                found.append(out["data"][kind])
    return found


@pytest.mark.slow
def test_tutorial_runs_and_says_what_it_shows(executed):
    nb, _ = executed
    text = "".join(outputs(nb, "stdout"))
    expected = (
        "all-MiniLM-L6-v2 (bert): 6 layers x 12 heads",
        "rows sum to 1: True",
        "24 sentences,",
        "same attention: True",
        "same as the local capture: True",
    )
    for line in expected:
        assert line in text
    assert "dep_to_head" in text or "head_to_dep" in text  # the dependency table printed
    frames = [h for h in outputs(nb, "text/html") if h.startswith("<iframe srcdoc=")]
    assert len(frames) == 4, "head, model and neuron views of the pair, and a second capture's"
    assert sum("<svg" in h for h in outputs(nb, "text/html")) == 1  # the static pictures


def export(nb, path: Path, theme: str = "light") -> Path:
    """`nb` as HTML (nbconvert's lab template without its CDN scripts) at `path`."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", theme=theme)
    exporter.raw_template = OFFLINE_TEMPLATE
    body, _ = exporter.from_notebook_node(nb)
    assert "cdnjs" not in body.split("</head>")[0], "the export template still loads a CDN"
    path.write_text(body, encoding="utf-8")
    return path


def open_page(browser, path: Path):
    """A page of `path` in its own context, recording requests (others aborted) and errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.requests, pg.errors = [], []
    context.on("request", lambda r: pg.requests.append(r.url))
    context.route(  # anything not local is aborted at once (and the tests fail on it)
        "**/*", lambda r: r.continue_() if r.request.url.startswith(LOCAL_SCHEMES) else r.abort()
    )
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.goto(path.as_uri())
    return pg


def assert_clean(page) -> None:
    assert not page.errors, page.errors
    assert all(u.startswith(LOCAL_SCHEMES) for u in page.requests), page.requests


@pytest.fixture(scope="module")
def page(executed, browser):
    nb, tmp = executed
    pg = open_page(browser, export(nb, tmp / "tutorial.html"))
    yield pg
    pg.context.close()


def ready_frame(element):
    """The frame of an iframe element, scrolled into view (offscreen frames are not
    painted) and loaded without an error."""
    element.scroll_into_view_if_needed()
    frame = element.content_frame()
    frame.wait_for_selector('#jaxattn[data-state="ready"]', timeout=20000)
    assert frame.eval_on_selector("#jx-error", "e => e.hidden"), frame.inner_text("#jx-error")
    return frame


def pixels(page, element, least: int = 0) -> tuple[int, float]:
    """(coloured pixels, brightness of the top rows) of a screenshot of `element`; with
    `least`, screenshots again for up to 10 s until it has that many coloured pixels
    (a frame just scrolled into view may not be painted yet on a loaded machine)."""
    for _ in range(40):
        png = base64.b64encode(element.screenshot()).decode("ascii")
        coloured, top = page.evaluate(PIXELS, png)
        if coloured >= least:
            break
        page.wait_for_timeout(250)
    return coloured, top


@pytest.mark.slow
def test_every_view_draws_in_the_exported_notebook(page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    frames = page.query_selector_all("iframe")
    assert len(frames) == 4
    seen = []
    for n, element in enumerate(frames):
        assert element.get_attribute("sandbox") == "allow-scripts"
        frame = ready_frame(element)
        view = frame.eval_on_selector("#jaxattn", "e => e.dataset.view")
        if view == "head":
            assert frame.eval_on_selector_all("#hv-svg line", "els => els.length") > 0
            tokens = frame.eval_on_selector_all('text.tok[data-side="left"]', TOKENS)
            seen.append(tokens)
        if view == "model":
            check_thumbnails(frame, "attention")
        if view == "neuron":
            assert frame.eval_on_selector_all("line.nv-line", "els => els.length") > 0
        coloured, _ = pixels(page, element, least=2001)
        assert coloured > 2000, f"frame {n} ({view} view): {coloured} coloured pixels"
        element.screenshot(path=str(ARTIFACTS / f"frame{n}_{view}.png"))
    # two captures, each in its own frame with its own tokens
    assert "cabinet" in seen[0] and "ideas" in seen[-1] and "cabinet" not in seen[-1]
    assert_clean(page)


def check_thumbnails(frame, kind: str) -> None:
    frame.wait_for_function(
        f"() => [...document.querySelectorAll('canvas.thumb')].every(c => c.dataset.drawn === "
        f"'{kind}')",
        timeout=10000,
    )
    thumbs = frame.eval_on_selector_all("canvas.thumb", THUMBS)
    assert len(thumbs) == 6 * 12
    assert all(filled > 0 for _, filled in thumbs), "an empty map"


@pytest.mark.slow
def test_norm_weights_and_tabs_switch_inside_one_frame(page):
    """The Weights menu redraws the model view with norm-based weights; the second
    capture's frame switches tabs from head to model without touching the others."""
    model, second = page.query_selector_all("iframe")[1], page.query_selector_all("iframe")[3]
    frame = ready_frame(model)
    check_thumbnails(frame, "attention")
    before = frame.eval_on_selector_all("canvas.thumb", THUMBS)
    frame.select_option("#kind", "norm")
    check_thumbnails(frame, "norm")
    assert frame.eval_on_selector_all("canvas.thumb", THUMBS) != before

    other = ready_frame(second)
    other.click('.tab[data-view="model"]')
    check_thumbnails(other, "attention")
    assert other.eval_on_selector("#jaxattn", "e => e.dataset.view") == "model"
    assert frame.eval_on_selector("#kind", "e => e.value") == "norm"  # the first frame kept its own
    assert pixels(page, second, least=2001)[0] > 2000
    assert_clean(page)


@pytest.mark.slow
def test_views_stay_readable_on_a_dark_notebook_theme(executed, browser):
    """A frame is transparent: on JupyterLab Dark the page's dark title sat on black."""
    nb, tmp = executed
    page = open_page(browser, export(nb, tmp / "tutorial-dark.html", theme="dark"))
    try:
        body = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert body not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"), body  # a dark page
        element = page.query_selector("iframe")
        ready_frame(element)
        coloured, top = pixels(page, element, least=2001)
        assert coloured > 2000 and top > 200, (coloured, top)
        assert_clean(page)
    finally:
        page.context.close()
