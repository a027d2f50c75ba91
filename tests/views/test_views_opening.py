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


@pytest.mark.parametrize(
    ("suffix", "views", "drawn"),
    [
        (".html", ["--views", "head,model"], "the page (--views head,model)"),
        (".svg", ["--views", "model"], "the model view"),
    ],
)
def test_a_token_where_no_neuron_view_is_drawn_is_refused_not_ignored(
    saved, tmp_path, capsys, suffix, views, drawn
):
    out = tmp_path / f"x{suffix}"
    assert main(["view", *saved, *views, "--out", str(out), "--token", "2"]) == 2
    err = capsys.readouterr().err
    assert f"--token 2: only the neuron view opens at a query token, and {drawn} has none" in err
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


# --compare and --stats-first open at --example too; --global and what has no query
# token refuse the flag in one line, as no longer ignored.


def segments_data_of(path) -> dict:
    """The JSON data a stats-first page embeds (segments_page.build_segments_html)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="jaxattn-segments">(.*?)</script>', text)
    return json.loads(found.group(1))


@pytest.fixture
def store(tmp_path) -> str:
    """A store of three examples (3, 4 and 5 tokens), compared with itself."""
    from store_helpers import captures, write_store

    write_store(tmp_path / "s.zarr", captures(3))
    return str(tmp_path / "s.zarr")


def test_the_compare_page_opens_at_the_example_asked(store, tmp_path, capsys):
    out = tmp_path / "c.html"
    argv = ["view", "--compare", store, store, "--out", str(out), "--overwrite"]
    assert main(argv) == 0
    assert header_of(out)["start"] == {"example": 0}  # as before: the first
    assert main([*argv, "--example", "2"]) == 0
    assert header_of(out)["start"] == {"example": 2}
    assert main([*argv, "--example", "-2"]) == 0  # from the end: 1 of 0..2
    assert header_of(out)["start"] == {"example": 1}
    assert main([*argv, "--limit", "2", "--example", "2"]) == 2  # two pairs: 0..1
    want = "--example 2: index 2 is out of range: the page holds 2 examples (0..1, or -2..-1)"
    assert want in capsys.readouterr().err


def test_the_stats_first_page_opens_at_the_example_asked(saved, tmp_path, capsys):
    out = tmp_path / "s.html"
    argv = ["view", *saved, "--stats-first", "--out", str(out), "--overwrite"]
    assert main(argv) == 0
    assert segments_data_of(out)["start"] == {"example": 0}
    assert main([*argv, "--example", "-1"]) == 0  # the third text (of 6 tokens)
    data = segments_data_of(out)
    assert data["start"] == {"example": 2} and len(data["examples"][2]["tokens"]) == LENGTHS[2]
    assert main([*argv, "--example", "3"]) == 2
    want = "--example 3: index 3 is out of range: the page holds 3 examples (0..2, or -3..-1)"
    assert want in capsys.readouterr().err


@pytest.mark.parametrize(
    "mode, flags, message",
    [
        (
            ["--global"],
            ["--example", "0"],  # a given 0 too: told apart from the default
            "--example 0: the joint query-key map is of the whole corpus, with no one "
            "example to open at (--global): drop --example",
        ),
        (
            ["--global"],
            ["--token", "1"],
            "--token 1: the joint query-key map has no query token to open at (--global): "
            "drop --token",
        ),
        (
            ["--compare", "{0}", "{0}"],
            ["--example", "1", "--token", "2"],
            "--token 2: the compare page has no query token to open at (--compare): drop --token",
        ),
        (
            ["--stats-first"],
            ["--token", "-1"],
            "--token -1: the stats-first page draws statistics per segment, no query token "
            "(--stats-first): drop --token",
        ),
    ],
)
def test_a_mode_that_cannot_open_there_refuses_the_flag(
    saved, tmp_path, capsys, mode, flags, message
):
    out = tmp_path / "x.html"
    argv = ["view", *saved, *[m.format(*saved) for m in mode], *flags, "--out", str(out)]
    if "--compare" in mode:  # A and B hold the captures: no INPUT
        argv = ["view", *[m.format(*saved) for m in mode], *flags, "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"jaxattn view: error: {message}"
    assert not out.exists()


@pytest.mark.parametrize("mode", ["--compare", "--stats-first"])
def test_the_compare_and_stats_first_pages_show_the_example(store, saved, tmp_path, page, mode):
    out = tmp_path / "x.html"
    inputs = ["--compare", store, store] if mode == "--compare" else [*saved, "--stats-first"]
    assert main(["view", *inputs, "--out", str(out), "--example", "2"]) == 0
    page.goto(out.as_uri())
    wait_ready(page, 2)
    assert page.input_value("#example") == "2"
    page.select_option("#example", "0")  # the selector still moves
    wait_ready(page, 0)
