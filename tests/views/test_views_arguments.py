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
