"""What the faulty-network report measures and draws: per-second process samples, their
growth figures, and the hand-written SVG chart (jaxattn.bench.proc_sample, svg_series).

Linux /proc only (the samples); no namespaces, no root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

import pytest

from jaxattn.bench.proc_sample import ProcessSampler, growth, sample
from jaxattn.bench.svg_series import HEIGHT, LEFT, RIGHT, TOP, WIDTH, line_chart, ticks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_sample_counts_the_fds_and_threads_opened_since():
    before = sample(os.getpid())
    pipes = [os.pipe() for _ in range(5)]  # 10 descriptors
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        after = sample(os.getpid())
    finally:
        stop.set()
        for t in threads:
            t.join()
        for r, w in pipes:
            os.close(r)
            os.close(w)
    assert before[0] > 0 and after[0] > 0  # kB resident
    assert after[1] - before[1] == 10
    assert after[2] - before[2] == 3


def test_a_gone_process_is_no_longer_sampled():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    with ProcessSampler({"child": child.pid, "me": os.getpid()}, every_s=0.05) as sampler:
        sampler.sample_now()
        assert {s[1] for s in sampler.samples} == {"child", "me"}
        child.kill()
        child.wait()
        n = len(sampler.samples)
        sampler.sample_now()
        sampler.mark("after")
        assert [s[1] for s in sampler.samples[n:]] == ["me"]
    assert sample(child.pid) is None
    assert sampler.events["after"] >= 0


def test_growth_figures_by_hand():
    samples = [
        (0.0, "a", 1000, 9, 4),  # before `since`: left out
        (1.0, "a", 2048, 10, 5),
        (2.0, "a", 3072, 30, 9),
        (3.0, "a", 2560, 11, 5),
        (1.5, "b", 1024, 3, 2),
        (9.0, "a", 9999, 99, 99),  # after `until`: left out
    ]
    g = growth(samples, since=1.0, until=3.0)
    assert g["a"] == {
        "samples": 3,
        "rss_mib": {"start": 2.0, "max": 3.0, "end": 2.5},
        "rss_max_over_start": 1.5,
        "fds": {"start": 10, "max": 30, "end": 11},
        "threads": {"start": 5, "max": 9, "end": 5},
    }
    assert g["b"]["samples"] == 1 and g["b"]["rss_max_over_start"] == 1.0


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
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "RSS <MiB>" in texts and "r1 <&>" in texts and "armed" in texts
    # x 0..10 and y 0..100 span the plot area exactly (ticks 0..10, 0..100).
    points = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    assert points == [(LEFT, HEIGHT - 50), (WIDTH - RIGHT, TOP)]
