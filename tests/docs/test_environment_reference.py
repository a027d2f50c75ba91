"""docs/reference/environment.md lists every variable jaxattn reads: each JAXATTN_ name
in the source (jaxattn/, service/) has its row, and each row names a variable the
source still reads (the page is the one list; this test is its check)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/reference/environment.md"
NAME = re.compile(r"\b((?:JAXATTN|XLA)_[A-Z0-9_]+)\b")


def in_source() -> set[str]:
    found = set()
    for folder in ("jaxattn", "service"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(NAME.findall(path.read_text(encoding="utf-8")))
    return found


def first_column() -> set[str]:
    """The variables named in the first cell of the page's table rows."""
    names = set()
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            names |= set(NAME.findall(line.split("|")[1]))
    return names


def test_every_variable_the_source_reads_has_its_row_and_no_row_is_stale():
    source, page = in_source(), first_column()
    assert source - page == set(), f"read by the source, missing from {PAGE.name}"
    assert page - source == set(), f"in {PAGE.name}, read nowhere in the source"


def test_the_page_is_in_the_site_navigation():
    assert "reference/environment.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
