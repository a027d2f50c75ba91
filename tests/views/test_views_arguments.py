"""The views' Python functions as a notebook calls them: one Capture or a list, a
single view name; what is neither gets a UsageError naming it, not a TypeError or an
AttributeError from deep inside (hand-made captures, no model)."""

from __future__ import annotations

import html

import numpy as np
import pytest
from capture_samples import make

from jaxattn import views
from jaxattn.analysis import flow, rollout
from jaxattn.errors import UsageError


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: views.View(None),
            r"the view page takes a Capture or a list of them, got NoneType",
        ),
        (lambda: views.build_html("caps"), r"the view page takes a Capture .* got str"),
        (
            lambda: views.build_html([make("float32"), "b"]),
            r"captures\[1\] is a str, not a Capture",
        ),
        (
            lambda: views.build_segments_html(None),
            r"the stats-first page takes a Capture .* got NoneType",
        ),
        (lambda: views.to_svg([make("float32")]), r"to_svg takes one Capture, got list: pick one"),
        (lambda: views.to_bertviz([make("float32")]), r"to_bertviz takes one Capture, got list"),
        (lambda: rollout([make("float32")]), r"rollout takes one Capture, got list"),
        (lambda: flow(make("float32").attention), r"flow takes one Capture, got ndarray"),
    ],
)
def test_what_is_no_capture_is_named(call, message):
    with pytest.raises(UsageError, match=message):
        call()


@pytest.mark.parametrize(
    ("options", "message"),
    [  # each was a TypeError or an IndexError from inside the drawing
        (dict(layer="1"), r"layer must be an index \(a whole number\), got '1'"),
        (dict(layer=1.0), r"layer must be an index \(a whole number\), got 1.0"),
        (dict(heads="0,1"), r"heads must be an index or a list of them, got '0,1'"),
        (dict(heads=[0.5]), r"heads must hold indices \(whole numbers\), got \[0.5\]"),
        (dict(tokens=3), r"tokens must be a \(start, stop\) pair of token indices, got 3"),
        (dict(min_weight="x"), r"min_weight must be a number, got 'x'"),
    ],
)
def test_svg_options_of_the_wrong_kind_are_named(options, message):
    with pytest.raises(UsageError, match=message):
        views.to_svg(make("float32"), "head", **options)


def test_one_head_of_the_static_head_view_is_that_head():
    cap = make("float32")  # heads (0, 2, 5): indices 0..2
    assert views.to_svg(cap, "head", heads=np.int64(2)) == views.to_svg(cap, "head", heads=[2])


def test_write_png_of_a_capture_says_to_draw_it_first(tmp_path):
    with pytest.raises(UsageError, match=r"write_png takes the SVG text .*got Capture"):
        views.write_png(tmp_path / "x.png", make("float32"))


def test_labels_as_one_string_are_refused_not_counted_by_letter():
    with pytest.raises(UsageError, match="labels must be a list of names, one per capture"):
        views.build_html(make("float32"), labels="one")


@pytest.mark.parametrize("height", ["600px", 0, 1.5, None])
def test_a_frame_height_that_is_no_number_of_pixels_is_refused(height):
    # "600px" made style="height:600pxpx": a frame the notebook drew at its default height
    with pytest.raises(UsageError, match="height must be a positive number of pixels"):
        views.View(make("float32"), height=height)


def test_the_notebook_frame_holds_the_page_at_the_height_asked():
    shown = views.View(make("float32"), views="head", height=np.int64(480))._repr_html_()
    assert 'style="width:100%;height:480px;' in shown
    assert html.escape(views.build_html(make("float32"), views="head"), quote=True) in shown


def test_one_view_name_is_that_view():
    cap = make("float32")
    # was "unknown views ['h', 'e', 'a', 'd']": the string was read letter by letter
    assert views.build_html(cap, views="head") == views.build_html(cap, views=("head",))
