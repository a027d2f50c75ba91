"""`jaxattn view --example N --token T` of an HTML page: the page opens at that example,
its neuron view at that query token (the page's header, "start"), and out-of-range
values are refused with the static exports' message. Saved synthetic captures (no
model); one check in the session's headless Chromium."""

from __future__ import annotations

import json
import re

import pytest
from test_views_static import synthetic
from views_helpers import wait_ready

from jaxattn.cli import main

LENGTHS = (5, 7, 6)  # tokens of the three saved examples


def header_of(path) -> dict:
    """The JSON header a page embeds (page.packed_body)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="jaxattn-data">(.*?)</script>', text)
    return json.loads(found.group(1))


@pytest.fixture
def saved(tmp_path) -> list[str]:
    paths = []
    for k, t in enumerate(LENGTHS):
        paths.append(str(tmp_path / f"{k}.npz"))
        synthetic(1, 2, t, seed=k).save(paths[-1])
    return paths


def test_a_page_opens_at_the_example_and_token_asked(saved, tmp_path):
    out = tmp_path / "x.html"
    argv = ["view", *saved, "--out", str(out), "--overwrite"]
    assert main(argv) == 0
    assert header_of(out)["start"] == {"example": 0, "token": 0}  # as before: the first
    assert main([*argv, "--example", "1", "--token", "6"]) == 0
    assert header_of(out)["start"] == {"example": 1, "token": 6}
    assert main([*argv, "--example", "-1", "--token", "5"]) == 0  # from the end: example 2
    assert header_of(out)["start"] == {"example": 2, "token": 5}
    assert main([*argv, "--example", "1", "--token", "-1"]) == 0  # its last token, of 7
    assert header_of(out)["start"] == {"example": 1, "token": 6}


@pytest.mark.parametrize("suffix", [".html", ".svg"])
def test_an_example_or_token_out_of_range_is_refused_as_by_a_static_export(
    saved, tmp_path, capsys, suffix
):
    out = tmp_path / f"x{suffix}"
    argv = ["view", *saved, "--views", "neuron", "--out", str(out)]
    assert main([*argv, "--example", "3"]) == 2
    want = "--example 3: index 3 is out of range: INPUT holds 3 examples (0..2, or -3..-1)"
    assert want in capsys.readouterr().err
    assert main([*argv, "--example", "-4"]) == 2
    assert "--example -4: index -4 is out of range: INPUT holds 3 examples" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--example", "1", "--token", "7"]) == 2  # example 1 has 7 tokens
    assert "--token 7: the example has 7 tokens" in capsys.readouterr().err
    assert main([*argv, "--example", "0", "--token", "-6"]) == 2  # -1 is its last token
    assert "--token -6: the example has 5 tokens (0..4, or -5..-1)" in capsys.readouterr().err
    assert not out.exists()


def test_the_page_shows_the_example_and_the_neuron_view_the_token(saved, tmp_path, page):
    out = tmp_path / "x.html"
    assert main(["view", *saved, "--out", str(out), "--example", "1", "--token", "6"]) == 0
    page.goto(out.as_uri())
    wait_ready(page, 1)
    assert page.input_value("#example") == "1"
    page.click('.tab[data-view="neuron"]')
    page.wait_for_selector("#nv-rows line.nv-line", state="attached")
    assert page.input_value("#nv-token") == "6"
    assert page.eval_on_selector_all("#nv-rows line.nv-line", "els => els[0].dataset.i") == "6"
    page.select_option("#example", "0")  # another example: its first token, as before
    wait_ready(page, 0)
    assert page.input_value("#nv-token") == "0"


def test_build_html_opens_where_asked_and_names_a_bad_place(tmp_path):
    from jaxattn.errors import UsageError
    from jaxattn.views import write_html

    caps = [synthetic(1, 2, t, seed=k) for k, t in enumerate(LENGTHS)]
    out = tmp_path / "x.html"
    write_html(out, caps, example=-2, token=4)
    assert header_of(out)["start"] == {"example": 1, "token": 4}
    write_html(out, caps, views="head", token=99)  # no neuron view: no token to open at
    assert header_of(out)["start"] == {"example": 0, "token": 0}
    with pytest.raises(UsageError, match=r"^example 3: index 3 is out of range: the page holds 3"):
        write_html(out, caps, example=3)
    write_html(out, caps, token=-2)  # example 0's 5 tokens: the one before the last
    assert header_of(out)["start"] == {"example": 0, "token": 3}
    with pytest.raises(
        UsageError, match=r"^token 5: the example has 5 tokens \(0..4, or -5..-1\)$"
    ):
        write_html(out, caps, token=5)
    with pytest.raises(UsageError, match=r"^example must be an index \(a whole number\), got '1'"):
        write_html(out, caps, example="1")
