"""What the faulty-network report measures and draws: per-second process samples, their
growth figures, and the hand-written SVG charts (jaxattn.bench.proc_sampler, svg_series).

Linux /proc only (the samples); no namespaces, no root. `read_proc` itself is tested
in test_rel_soak.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from jaxattn.bench.proc_sampler import ProcSampler, Sample, growth, read_proc
from jaxattn.bench.svg_series import (
    BOTTOM,
    GAP,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    line_chart,
    panels_chart,
    ticks,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

NS = "{http://www.w3.org/2000/svg}"


def test_a_gone_process_is_no_longer_sampled():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    with ProcSampler(every_s=0.05) as sampler:
        kid, me = sampler.track("child", child.pid), sampler.track("me", os.getpid())
        sampler.sample_once()
        assert kid.samples and me.samples
        child.kill()
        child.wait()
        n, m = len(kid.samples), len(me.samples)
        sampler.sample_once()
        assert len(kid.samples) == n and len(me.samples) > m
        assert kid.ended is not None and me.ended is None
    assert read_proc(child.pid) is None
    assert me.ended is not None  # stopping ends every series


def test_growth_figures_by_hand():
    samples = [
        Sample(0.0, 1000, 9, 4),  # before `since`: left out
        Sample(1.0, 2048, 10, 5),
        Sample(2.0, 3072, 30, 9),
        Sample(2.5, 2560, None, 6),  # no fd count: left out of the fds only
        Sample(3.0, 2560, 11, 5),
        Sample(9.0, 9999, 99, 99),  # after `until`: left out
    ]
    assert growth(samples, since=1.0, until=3.0) == {
        "samples": 4,
        "rss_mib": {"start": 2.0, "max": 3.0, "end": 2.5},
        "rss_max_over_start": 1.5,
        "fds": {"start": 10, "max": 30, "end": 11},
        "threads": {"start": 5, "max": 9, "end": 5},
    }
    one = growth([Sample(1.5, 1024, None, 2)])
    assert one["samples"] == 1 and one["rss_max_over_start"] == 1.0
    assert one["fds"] == {"start": None, "max": None, "end": None}
    assert growth(samples, since=10.0) is None


def test_ticks_are_round_and_cover_the_range():
    assert ticks(0, 2400) == [0, 500, 1000, 1500, 2000, 2500]
    assert ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert ticks(5, 5) == [5, 5.2, 5.4, 5.6, 5.8, 6.0]  # an empty range still draws


def test_the_chart_is_svg_with_a_line_per_series_inside_the_plot():
    svg = line_chart(
        {"r0": [(0, 0), (10, 100)], "r1 <&>": [(0, 50), (5, 20), (10, 30)]},
        title="RSS <MiB>",
        events={"armed": 5.0},
        y_label="MiB",
    )
    root = ET.fromstring(svg)  # well-formed, names escaped
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 2
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "RSS <MiB>" in texts and "r1 <&>" in texts and "armed" in texts
    # x 0..10 and y 0..100 span the plot area exactly (ticks 0..10, 0..100).
    points = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    assert points == [(LEFT, HEIGHT - 50), (WIDTH - RIGHT, TOP)]


def test_panels_share_the_x_axis_colours_and_legend_and_lines_break_at_none():
    ph = 100
    svg = panels_chart(
        [
            ("MiB", {"r0": [(0, 0), (4, 10), None, (6, 10), (10, 20)], "r1": [(0, 5)]}),
            ("fds", {"r0": [(0, 0), (10, 50)]}),
        ],
        title="two panels",
        events=[("T0", 5.0), ("T0", 8.0)],  # a name may repeat
        panel_height=ph,
    )
    root = ET.fromstring(svg)
    assert int(root.get("height")) == TOP + 2 * ph + GAP + BOTTOM
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 4  # r0 twice (broken at None) and r1 in the first panel, r0 in the second
    colours = [x.get("stroke") for x in lines]
    assert colours[0] == colours[1] == colours[3] != colours[2]
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert texts.count("r0") == 1 and texts.count("r1") == 1  # one legend
    assert texts.count("T0") == 2  # both events named, in the top panel only
    dashed = [x for x in root.iter(f"{NS}line") if x.get("stroke-dasharray")]
    assert len(dashed) == 4  # each event in each panel
    # the second panel: x 0..10 spans the plot's width, y 0..50 its height, below the first
    points = [tuple(map(float, p.split(","))) for p in lines[3].get("points").split()]
    bottom = TOP + 2 * ph + GAP
    assert points == [(LEFT, bottom), (WIDTH - RIGHT, bottom - ph)]
