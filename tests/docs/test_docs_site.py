"""The docs site: it builds with --strict, offline, from this tree; the README keeps its promises.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from
the navigation, a docstring mkdocstrings cannot render (a renamed symbol), a
generated table that no longer matches the code, or a hand-written table that
lists other names than the code (docs/hooks/: the hook and the tables).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

import reference_tables  # noqa: E402
import repo_pages  # noqa: E402

QUICK_START = ("bash scripts/setup.sh && .venv/bin/jaxattn demo", "bash scripts/test.sh")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_site_builds_strict_and_offline(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) > 30
    for page in pages:
        html = page.read_text(encoding="utf-8")
        # no CDN script or style sheet, no web font: the site works without a network
        assert not re.search(r"<(script|link)[^>]+(src|href)=\"(https?:)?//", html), page
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
    assert (site / "protos/jaxattn/v1/attention.proto").is_file()
    assert (site / "img/html_head.png").is_file()


def test_the_root_pages_are_in_the_site_with_their_links_mapped(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "A five-minute tour" in home  # README.md is the home page
    assert 'href="errors/"' in home and 'src="img/html_head.png"' in home
    for page in ("build", "store", "reliability", "analysis", "benchmarks", "changelog"):
        assert (site / page / "index.html").is_file(), page


def test_the_reference_lists_every_name_the_code_defines(site):
    from jaxattn.config import FAMILIES
    from jaxattn.dtypes import OUTPUT_DTYPES
    from jaxattn.quantities import DECODER_HEAD_STATS, HEAD_STATS, NORM_MEASURES, QUANTITIES
    from jaxattn.spec import PRECISIONS

    quantities = (site / "reference/quantities/index.html").read_text(encoding="utf-8")
    for name in (*QUANTITIES, *HEAD_STATS, *DECODER_HEAD_STATS, *NORM_MEASURES):
        assert f"<code>{name}</code>" in quantities, name
    dtypes = (site / "reference/dtypes/index.html").read_text(encoding="utf-8")
    for name in (*OUTPUT_DTYPES, *PRECISIONS):
        assert f"<code>{name}</code>" in dtypes, name
    families = (site / "families/index.html").read_text(encoding="utf-8")
    for name in FAMILIES:
        assert f"<td>{name}</td>" in families, name


def test_the_generated_tables_are_current():
    assert reference_tables.main(["--check"]) == 0, (
        "run: .venv/bin/python docs/hooks/reference_tables.py"
    )


def test_a_stale_table_is_found_and_rewritten():
    page = "x\n<!-- generated: dtypes -->\n| old |\n<!-- end: dtypes -->\ny\n"
    new, stale = reference_tables.refresh(page)
    assert stale == ["dtypes"] and "| `uint8` | 1 |" in new
    assert reference_tables.refresh(new) == (new, [])


def test_the_checked_tables_catch_a_missing_name():
    families = (ROOT / "docs/families.md").read_text(encoding="utf-8")
    assert reference_tables.check("docs/families.md", families) == []
    assert reference_tables.check("docs/families.md", families.replace("`electra`", "`x`"))
    errors = (ROOT / "docs/errors.md").read_text(encoding="utf-8")
    assert reference_tables.check("docs/errors.md", errors) == []
    assert reference_tables.check("docs/errors.md", errors.replace("+-- TooLongError", "+--"))
    assert reference_tables.check("docs/errors.md", errors.replace("| 130 |", "| 131 |"))


@pytest.mark.parametrize(
    ("page", "link", "mapped"),
    [
        ("index.md", "docs/errors.md", "errors.md"),  # README.md, at the root
        ("index.md", "docs/img/head.png", "img/head.png"),
        ("index.md", "BUILD.md#tests", "build.md#tests"),
        ("index.md", "docs/reference/dtypes.md#output-dtypes", "reference/dtypes.md#output-dtypes"),
        ("cli.md", "../STORE.md", "store.md"),  # docs/cli.md
        ("reference/protocol.md", "../../BUILD.md#generated-files", "../build.md#generated-files"),
        (
            "reference/protocol.md",
            "../../protos/jaxattn/v1/attention.proto",
            "../protos/jaxattn/v1/attention.proto",
        ),
        ("reference/grammar.md", "../errors.md", "../errors.md"),
        ("build.md", "README.md", "index.md"),
        ("python.md", "#capture", "#capture"),
        ("python.md", "https://example.org/x.md", "https://example.org/x.md"),
        ("python.md", "../jaxattn/engine/model.py", "../jaxattn/engine/model.py"),  # not a page
        ("python.md", "nope.md", "nope.md"),  # no such file: left for the strict build to name
        ("tutorial.md", "X`^bmFI-R7mQ[AeW/yv/#", "X`^bmFI-R7mQ[AeW/yv/#"),  # data, not a link
    ],
)
def test_links_are_mapped_from_the_repository_to_the_site(page, link, mapped):
    assert repo_pages.map_link(link, page) == mapped


def test_links_in_code_are_left_alone():
    page = "[a](docs/cli.md)\n```\n[b](docs/cli.md)\n```\n![c](docs/img/head.png)\n"
    assert repo_pages.map_links(page, "index.md") == (
        "[a](cli.md)\n```\n[b](docs/cli.md)\n```\n![c](img/head.png)\n"
    )


def test_a_notebook_becomes_a_page_from_its_stored_outputs(tmp_path):
    import nbformat

    png = (  # one pixel
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
        "AAAABJRU5ErkJggg=="
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(
            "# A tutorial\n\nSee [the quantities](reference/quantities.md)."
        ),
        nbformat.v4.new_code_cell(
            "print(1)",
            outputs=[
                nbformat.v4.new_output("stream", name="stdout", text="1\n"),
                nbformat.v4.new_output("stream", name="stderr", text="a warning\n"),
                nbformat.v4.new_output("display_data", data={"image/png": png}),
                nbformat.v4.new_output("display_data", data={"text/html": "<b>bold</b>"}),
            ],
        ),
    ]
    path = tmp_path / "tutorial.ipynb"
    nbformat.write(notebook, path)
    body, images = repo_pages.render_notebook(path)
    assert "# A tutorial" in body and "print(1)" in body and "<b>bold</b>" in body
    assert "a warning" not in body
    assert "[the quantities](reference/quantities.md)" in body
    assert list(images) == ["tutorial_files/output_1_1.png"]
    assert "](tutorial_files/output_1_1.png)" in body


def test_a_notebook_without_outputs_is_run_when_the_build_asks(tmp_path):
    """JAXATTN_DOCS_RUN_NOTEBOOKS=1: a kernel of this interpreter, importing this tree."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    notebook.cells = [nbformat.v4.new_code_cell("import jaxattn\nprint(jaxattn.__file__)")]
    path = tmp_path / "run.ipynb"
    nbformat.write(notebook, path)
    assert "__init__.py" not in repo_pages.render_notebook(path)[0]
    body, _ = repo_pages.render_notebook(path, run=True)
    assert str(ROOT / "jaxattn" / "__init__.py") in body


def test_the_readme_keeps_its_quick_start_and_stays_short():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick_start.splitlines() if line.startswith("    ")]
    assert commands[:2] == list(QUICK_START)
    assert len(readme.splitlines()) < 300


def test_the_changelog_is_in_keep_a_changelog_form():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (.+)$", changelog, re.M)
    assert releases[0].startswith("Unreleased") and any(r.startswith("0.2.0") for r in releases)
    kinds = set(re.findall(r"^### (.+)$", changelog, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
