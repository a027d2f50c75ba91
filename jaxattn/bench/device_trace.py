"""What a device did during a `jax.profiler` trace: compute, copies, and their overlap.

    with jax.profiler.trace(folder, create_perfetto_trace=True):
        engine.capture(texts)                         # the work to look at
    summary = device_trace.summarize(device_trace.read_events(folder))

The question it answers for the GPU run (issue 26: attention capture 7 % short of its
target with outputs staged): does the device-to-host copy of one batch's outputs run
beside the next batch's compute, or after it? A trace's device events (CUPTI's
kernels and memcpys on a GPU: the perfetto trace's processes named ``/device:...``,
one thread a stream) are sorted into kinds by name (`kind_of`): ``copy_d2h``,
``copy_h2d``, ``copy_other``, ``memset`` and ``compute`` (everything else). Each kind's
busy time is the union of its events' intervals (streams overlapping each other count
once), so:

- ``span_ms``: the first device event's start to the last one's end;
- ``busy_ms[kind]``: the time at least one event of the kind ran;
- ``d2h_beside_compute_ms``: the time a device-to-host copy and a kernel ran at once
  (``d2h_hidden``: its share of the copies' busy time; 1 is a copy hidden entirely);
- ``idle_ms``: the time within the span that no device event ran (the device waiting
  for the host: dispatch, Python, a transfer not yet asked for);
- ``top_kernels``: the compute events by total time, name, count and milliseconds.

A trace with no device process (the CPU backend, or a GPU without CUPTI) has
``devices`` empty: the summary says so rather than guessing from host events.
"""

from __future__ import annotations

import collections
import gzip
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

KINDS = ("compute", "copy_d2h", "copy_h2d", "copy_other", "memset")


def kind_of(name: str) -> str:
    """The kind of a device event by its name (CUPTI's: "MemcpyD2H", "Memcpy DtoH
    (Device -> Pinned)", "Memset", or a kernel's name)."""
    low = name.lower().replace(" ", "")
    if "memset" in low:
        return "memset"
    if "memcpy" in low or ("copy" in low and ("dtoh" in low or "htod" in low)):
        if "d2h" in low or "dtoh" in low:
            return "copy_d2h"
        if "h2d" in low or "htod" in low:
            return "copy_h2d"
        return "copy_other"
    return "compute"


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals (start, end) merged into disjoint, sorted ones."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length of disjoint intervals."""
    return sum(b - a for a, b in intervals)


def intersection(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The common parts of two lists of disjoint, sorted intervals."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def read_events(folder: str | Path) -> list[dict]:
    """The trace events of the newest perfetto trace `jax.profiler.trace(folder,
    create_perfetto_trace=True)` wrote under `folder`."""
    found = sorted(Path(folder).glob("**/perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no perfetto_trace.json.gz under {folder}")
    with gzip.open(found[-1], "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def summarize(events: Sequence[dict], top: int = 10) -> dict:
    """The device activity of Chrome-trace `events` (see the module doc): one entry per
    device process in ``devices``, times in milliseconds."""
    names = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    devices = {pid for pid, name in names.items() if name.startswith("/device:")}
    spans: dict[int, dict[str, list]] = collections.defaultdict(lambda: {k: [] for k in KINDS})
    kernels: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in devices:
            continue
        start, dur = float(e["ts"]), float(e.get("dur", 0.0))
        kind = kind_of(e.get("name", ""))
        spans[e["pid"]][kind].append((start, start + dur))
        if kind == "compute":
            kernels[e["pid"]][e.get("name", "")] += dur
            counts[e["pid"]][e.get("name", "")] += 1
    out = []
    for pid in sorted(spans):
        busy = {kind: union(spans[pid][kind]) for kind in KINDS}
        every = union(iv for kind in KINDS for iv in busy[kind])
        span = (every[-1][1] - every[0][0]) if every else 0.0
        beside = length(intersection(busy["copy_d2h"], busy["compute"]))
        d2h = length(busy["copy_d2h"])
        out.append(
            {
                "device": names[pid],
                "events": sum(len(v) for v in spans[pid].values()),
                "span_ms": span / 1e3,
                "busy_ms": {kind: length(busy[kind]) / 1e3 for kind in KINDS},
                "idle_ms": (span - length(every)) / 1e3,
                "d2h_beside_compute_ms": beside / 1e3,
                "d2h_hidden": beside / d2h if d2h else None,
                "top_kernels": [
                    {"name": name, "count": counts[pid][name], "ms": us / 1e3}
                    for name, us in kernels[pid].most_common(top)
                ],
            }
        )
    return {"devices": out}


def describe(summary: dict) -> list[str]:
    """One line a device (and one a top kernel) of `summarize`'s result, for a log."""
    if not summary["devices"]:
        return ["no device events in the trace (the CPU backend, or no CUPTI on the GPU)"]
    lines = []
    for d in summary["devices"]:
        busy = ", ".join(f"{k} {v:.1f}" for k, v in d["busy_ms"].items() if v)
        hidden = "-" if d["d2h_hidden"] is None else f"{d['d2h_hidden']:.0%}"
        lines.append(
            f"{d['device']}: span {d['span_ms']:.1f} ms, busy ms: {busy}; idle "
            f"{d['idle_ms']:.1f} ms; device-to-host copies beside compute "
            f"{d['d2h_beside_compute_ms']:.1f} ms ({hidden} of the copies)"
        )
        lines += [
            f"  {k['ms']:8.2f} ms {k['count']:5d}x {k['name'][:90]}" for k in d["top_kernels"]
        ]
    return lines
