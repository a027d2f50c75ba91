"""MkDocs hook: the repository's root pages join the site, and every link means one thing.

The root pages stay where GitHub readers find them (README.md, BUILD.md, ...);
`ROOT_PAGES` names the site page each becomes (README.md is the home page). Links
are written as they resolve in the repository, so they work on GitHub; before a
page is rendered this hook maps each relative link from its place in the
repository to its place in the site: `docs/errors.md` from README.md becomes
`errors.md`, `../BUILD.md` from docs/cli.md becomes `build.md`. The few other
repository files a page links to (`REPO_FILES`) are copied into the site. A link
to any other repository file, or to none, is left as written, so the strict
build names it (and text that only looks like a link, such as data in a
notebook's HTML output, is not touched).

A notebook in docs/ (docs/tutorial.ipynb) becomes a page of the same name
(tutorial.md), rendered from its stored outputs (`render_notebook`); the
notebook itself is copied beside it for download. A notebook committed without
outputs shows its prose and code only, unless the build runs it:
`JAXATTN_DOCS_RUN_NOTEBOOKS=1 .venv/bin/mkdocs build` executes each notebook
first, with this interpreter and this tree's jaxattn (for the published site;
the tests build without it, in seconds).

It also keeps the generated tables current (`reference_tables`): a stale one is
a warning, which `mkdocs build --strict` (tests/docs/) turns into a failure.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from pathlib import Path

import reference_tables  # beside this file (MkDocs puts a hook's folder on sys.path)
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.repo_pages")

ROOT = Path(__file__).resolve().parents[2]
DOCS = "docs"

# Repository root page -> its page in the site.
ROOT_PAGES = {
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
    "BUILD.md": "build.md",
    "STORE.md": "store.md",
    "RELIABILITY.md": "reliability.md",
    "ANALYSIS.md": "analysis.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CONTRIBUTING.md": "contributing.md",
}
_SITE_TO_REPO = {site: repo for repo, site in ROOT_PAGES.items()}

# Other repository files the pages link to, copied into the site at the same path.
REPO_FILES = ("protos/jaxattn/v1/attention.proto",)

# Inline links and images: [text](target "title"), ![alt](target); reference definitions.
_INLINE = re.compile(r"(\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
_REFDEF = re.compile(r"^( {0,3}\[[^\]]+\]:\s*<?)(\S+?)(>?(?:\s.*)?)$", re.M)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def repo_path(src_uri: str) -> str:
    """The repository path (posix, from the root) of a site file."""
    return _SITE_TO_REPO.get(src_uri) or f"{DOCS}/{src_uri}"


def site_path(path: str) -> str | None:
    """The site file of a repository path, or None when the site does not hold it."""
    if path in ROOT_PAGES:
        return ROOT_PAGES[path]
    if path in REPO_FILES:
        return path
    if path.startswith(f"{DOCS}/"):
        return path[len(DOCS) + 1 :]
    return None


def map_link(target: str, page_uri: str) -> str:
    """A link written from the page's place in the repository, as the site needs it."""
    if _SCHEME.match(target) or target.startswith(("#", "/")):
        return target
    path, hash_, fragment = target.partition("#")
    if not path:
        return target
    here = posixpath.dirname(repo_path(page_uri))
    resolved = posixpath.normpath(posixpath.join(here, path))
    site = site_path(resolved)
    if site is None or not (ROOT / resolved).exists():
        return target  # outside the site, or no file (nor a link: data): left as written
    return posixpath.relpath(site, posixpath.dirname(page_uri) or ".") + hash_ + fragment


def map_links(markdown: str, page_uri: str) -> str:
    """`map_link` on every inline link, image and reference definition outside fenced code."""
    out, fence = [], None
    chunk: list[str] = []

    def flush():
        text = "".join(chunk)
        text = _INLINE.sub(lambda m: m[1] + map_link(m[2], page_uri) + m[3], text)
        text = _REFDEF.sub(lambda m: m[1] + map_link(m[2], page_uri) + m[3], text)
        out.append(text)
        chunk.clear()

    for line in markdown.splitlines(keepends=True):
        m = _FENCE.match(line)
        if fence is None and m:
            flush()
            fence = m[1][0] * 3
            out.append(line)
        elif fence is not None:
            out.append(line)
            if line.lstrip().startswith(fence):
                fence = None
        else:
            chunk.append(line)
    flush()
    return "".join(out)


RUN_NOTEBOOKS = "JAXATTN_DOCS_RUN_NOTEBOOKS"


def run_notebook(notebook, timeout: float = 600) -> None:
    """Execute a notebook in place: a python3 kernel of this interpreter that imports this
    tree's jaxattn, in a temporary working directory (what tests/notebook does)."""
    import json
    import sys
    import tempfile

    import nbclient

    with tempfile.TemporaryDirectory(prefix="jaxattn-docs-") as tmp:
        spec = Path(tmp, "jupyter", "kernels", "python3")
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        kernel = {"argv": argv, "display_name": "jaxattn docs", "language": "python"}
        (spec / "kernel.json").write_text(json.dumps(kernel))
        saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "PYTHONPATH")}
        for key, value in (("JUPYTER_PATH", str(spec.parents[1])), ("PYTHONPATH", str(ROOT))):
            os.environ[key] = os.pathsep.join(filter(None, (value, saved[key])))
        try:
            client = nbclient.NotebookClient(
                notebook,
                kernel_name="python3",
                timeout=timeout,
                resources={"metadata": {"path": tmp}},
            )
            client.execute()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def render_notebook(path: Path, run: bool = False) -> tuple[str, dict[str, bytes]]:
    """A notebook as Markdown, from its stored outputs (or those of running it first, `run`),
    and the files its images need.

    Images go to `<stem>_files/` beside the page; HTML outputs stay HTML; what a
    cell wrote to stderr (warnings, progress bars) is left out.
    """
    import nbformat
    from nbconvert import MarkdownExporter

    notebook = nbformat.read(path, as_version=4)
    if run:
        run_notebook(notebook)
    for cell in notebook.cells:  # warnings of the machine that ran it, not the tutorial's
        if "outputs" in cell:
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    body, resources = MarkdownExporter().from_notebook_node(
        notebook, resources={"output_files_dir": f"{path.stem}_files"}
    )
    return body, dict(resources.get("outputs", {}))


def on_files(files, config):
    for repo, site in ROOT_PAGES.items():
        if files.get_file_from_path(site) is not None:
            raise PluginError(f"{DOCS}/{site} and {repo} would both be the page {site}")
        files.append(File.generated(config, site, abs_src_path=str(ROOT / repo)))
    for repo in REPO_FILES:
        files.append(File.generated(config, repo, abs_src_path=str(ROOT / repo)))
    for notebook in sorted(Path(config.docs_dir).rglob("*.ipynb")):
        relative = notebook.relative_to(config.docs_dir)
        if any(part.startswith(".") for part in relative.parts):  # .ipynb_checkpoints
            continue
        page = relative.with_suffix(".md").as_posix()
        if files.get_file_from_path(page) is not None:
            raise PluginError(
                f"{DOCS}/{page} and the notebook {notebook.name} would both be {page}"
            )
        body, images = render_notebook(notebook, run=os.environ.get(RUN_NOTEBOOKS) == "1")
        files.append(File.generated(config, page, content=body))
        folder = posixpath.dirname(page)
        for name, data in images.items():
            files.append(File.generated(config, posixpath.join(folder, name), content=data))
    return files


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    markdown, stale = reference_tables.refresh(markdown)
    for name in stale:
        log.warning(
            f"{repo_path(uri)}: the generated table '{name}' is out of date; "
            "run: .venv/bin/python docs/hooks/reference_tables.py"
        )
    for problem in reference_tables.check(repo_path(uri), markdown):
        log.warning(f"{repo_path(uri)}: {problem}")
    return map_links(markdown, uri)


def on_serve(server, config, builder):
    for repo in (*ROOT_PAGES, *REPO_FILES):
        server.watch(str(ROOT / repo))
    return server
