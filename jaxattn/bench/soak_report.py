"""The soak's verdict, its markdown summary and its chart (`jaxattn.bench.soak`; the chart
drawn by `jaxattn.bench.svg_series`).

Pass/fail, each check over the open-loop phase and the capacity burst before it:

* **wrong**: 0 answers that fail their check;
* **lost**: 0 calls sent that neither answered nor failed with a status;
* **statuses**: only designed ones (`soak.DESIGNED`);
* **restarts**: every SIGTERM (the restarts' and the final one of each replica)
  drained and exited 0 within its grace (+30 s), every SIGKILL ended the process,
  every replica listened again on its port;
* **RSS**: in each process lifetime (a replica's, between restarts; the driver's),
  the largest sample after the baseline window is at most `rss_limit` (1.5) x the
  baseline (the median RSS over `baseline_s` seconds, starting `warm_s` seconds
  after the lifetime was ready: its shapes compiled and the open loop reaching it);
  across the lifetimes of one replica, each baseline is at most
  `rss_limit` x the first's (the same phase of each life);
* **fds, threads**: no growth: over each lifetime's judged part (from its
  baseline window on), the maximum of its second half exceeds the maximum of its
  first half by at most the tolerance (16 each by default). A leak grows without
  bound, so it shows as a later maximum above every earlier one; what does not
  grow is a plateau, and a plateau may be reached late in a lifetime: gRPC's
  handler threads are made on demand up to the server's concurrency cap, and
  each client connection holds one fd; 16 is the churn of a few reconnecting
  clients and handler threads at the sampling instant. Across lifetimes: each
  fd baseline within the tolerance of the first's. Not threads: every client
  reconnects to a restarted replica at once, so its handler pool starts larger
  than a first lifetime's (75 against 43 threads in the 10-minute run) and then
  stays flat; that is judged within each lifetime.

Samples taken after a process was told to stop (its drain) are not judged.

A lifetime shorter than its warm-up, baseline window and 3 more samples is not
judged (said so); a check with nothing judged is "not judged", and the run
passes only when every check passes. Stdlib only.
"""

from __future__ import annotations

import statistics

from jaxattn.bench.svg_series import panels_chart

# Statuses the service is designed to answer under the soak's faults (RELIABILITY.md,
# "Faults: what each gets"): a replica going away or draining (UNAVAILABLE, once the
# client's retries are spent), overload (RESOURCE_EXHAUSTED), a deadline
# (DEADLINE_EXCEEDED), a stream cut by a restart (CANCELLED). Any other fails the soak.
DESIGNED = ("UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "CANCELLED")

PASS, FAIL, NOT_JUDGED = "pass", "FAIL", "not judged"


def _get(sample, key):
    return sample[key] if isinstance(sample, dict) else getattr(sample, key)


def lifetime(series: dict, options) -> dict:
    """The figures of one process lifetime (`Series` as a dict) and whether it was judged."""
    stopping = series.get("stopping")
    samples = [s for s in series["samples"] if stopping is None or _get(s, "t") < stopping]
    out = dict(
        name=series["name"],
        lifetime=series["lifetime"],
        pid=series["pid"],
        seconds=round((series["ended"] or 0) - series["started"], 1),
        samples=len(samples),
        rss_max_mib=round(max((_get(s, "rss_kb") for s in samples), default=0) / 1024, 1),
    )
    ready = series["ready"]
    if ready is None:
        return dict(out, judged=False, why="never served")
    w0, w1 = ready + options.warm_s, ready + options.warm_s + options.baseline_s
    base = [s for s in samples if w0 <= _get(s, "t") < w1]
    rest = [s for s in samples if _get(s, "t") >= w1]
    if len(base) < 3 or len(rest) < 3:
        return dict(out, judged=False, why=f"too short ({out['seconds']} s) to judge")
    judged = base + rest
    b_rss = statistics.median(_get(s, "rss_kb") for s in base)
    r_max = max(_get(s, "rss_kb") for s in rest)
    mid = (_get(judged[0], "t") + _get(judged[-1], "t")) / 2
    first = [s for s in judged if _get(s, "t") <= mid]
    second = [s for s in judged if _get(s, "t") > mid] or first[-1:]

    def growth(key):
        a = [_get(s, key) for s in first if _get(s, key) is not None]
        b = [_get(s, key) for s in second if _get(s, key) is not None]
        return (max(b) - max(a)) if a and b else None

    def base_of(key):
        vals = [_get(s, key) for s in base if _get(s, key) is not None]
        return statistics.median(vals) if vals else None

    ts = [_get(s, "t") / 3600 for s in judged]
    ys = [_get(s, "rss_kb") / 1024 for s in judged]
    slope = None
    if len(set(ts)) > 1:
        mx, my = statistics.fmean(ts), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in ts)
        slope = sum((x - mx) * (y - my) for x, y in zip(ts, ys, strict=True)) / den
    return dict(
        out,
        judged=True,
        baseline_rss_mib=round(b_rss / 1024, 1),
        max_rss_after_mib=round(r_max / 1024, 1),
        rss_ratio=round(r_max / b_rss, 3),
        rss_slope_mib_per_h=None if slope is None else round(slope, 1),
        baseline_fds=base_of("fds"),
        max_fds=max((_get(s, "fds") or 0 for s in judged), default=None),
        fd_growth=growth("fds"),
        baseline_threads=base_of("threads"),
        max_threads=max(_get(s, "threads") for s in judged),
        thread_growth=growth("threads"),
    )


def _labels(lives) -> str:
    return ", ".join(f"{x['name']}#{x['lifetime']}" for x in lives)


def judge(figures: dict, options) -> dict:
    """Pass/fail of each check (module docstring) and of the run, with the figures behind them."""
    phases = [figures[p] for p in ("capacity", "soak") if p in figures]
    wrong = sum(p["wrong"] for p in phases)
    lost = sum(p["lost"] for p in phases)
    undesigned: dict = {}
    for p in phases:
        for k, v in p["statuses"].items():
            if k not in DESIGNED:
                undesigned[k] = undesigned.get(k, 0) + v
    lives = [lifetime(s, options) for s in figures.get("series", [])]
    judged = [x for x in lives if x["judged"]]
    checks = {}

    def check(name: str, ok: bool | None, detail: str) -> None:
        checks[name] = dict(
            result=NOT_JUDGED if ok is None else PASS if ok else FAIL, detail=detail
        )

    sent = sum(p["sent"] for p in phases)
    check("wrong", wrong == 0 if sent else None, f"{wrong} wrong of {sent} sent")
    check("lost", lost == 0 if sent else None, f"{lost} lost of {sent} sent")
    check(
        "statuses",
        not undesigned if sent else None,
        f"undesigned: {undesigned or 'none'} (designed: {', '.join(DESIGNED)})",
    )
    bad = []
    for r in figures.get("restarts", []):
        if "error" in r:
            bad.append(f"replica {r['replica']}: {r['error']}")
        elif r["signal"] == "SIGTERM" and (r["exit_code"] != 0 or r["overran_grace"]):
            bad.append(f"replica {r['replica']} SIGTERM: exit {r['exit_code']}")
        elif r["signal"] == "SIGKILL" and r["exit_code"] != -9:
            bad.append(f"replica {r['replica']} SIGKILL: exit {r['exit_code']}")
    for r in figures.get("final_stops", []):
        if r["exit_code"] != 0 or r["overran_grace"]:
            late = f" (still running {r['stop_s']} s after it)" if r["overran_grace"] else ""
            bad.append(f"replica {r['replica']} final SIGTERM: exit {r['exit_code']}{late}")
    n_restarts = len(figures.get("restarts", []))
    check(
        "restarts",
        (not bad) if n_restarts else None,
        f"{n_restarts} restarts, {len(figures.get('final_stops', []))} final SIGTERMs"
        + (f"; {'; '.join(bad)}" if bad else ", all as designed"),
    )

    over = [x for x in judged if x["rss_ratio"] > options.rss_limit]
    across = []
    by_name: dict = {}
    for x in judged:
        by_name.setdefault(x["name"], []).append(x)
    for name, xs in by_name.items():
        first = xs[0]
        for x in xs[1:]:
            if x["baseline_rss_mib"] > options.rss_limit * first["baseline_rss_mib"]:
                across.append(f"{name}#{x['lifetime']} baseline RSS {x['baseline_rss_mib']} MiB")
            key, tol = "baseline_fds", options.fd_tolerance
            if x[key] is not None and first[key] is not None and x[key] - first[key] > tol:
                across.append(f"{name}#{x['lifetime']} {key} {x[key]} vs {first[key]}")
    worst = max(judged, key=lambda x: x["rss_ratio"], default=None)
    check(
        "rss",
        (not over and not any("RSS" in a for a in across)) if judged else None,
        f"{len(judged)} of {len(lives)} lifetimes judged; worst "
        + (f"{worst['name']}#{worst['lifetime']} x{worst['rss_ratio']}" if worst else "-")
        + f" (limit x{options.rss_limit})"
        + (f"; over: {_labels(over)}" if over else ""),
    )
    for key, tol, label in (
        ("fd_growth", options.fd_tolerance, "fds"),
        ("thread_growth", options.thread_tolerance, "threads"),
    ):
        vals = [x for x in judged if x[key] is not None]
        grew = [x for x in vals if x[key] > tol]
        cross = [a for a in across if label[:-1] in a]
        most = max(vals, key=lambda x: x[key], default=None)
        check(
            label,
            (not grew and not cross) if vals else None,
            f"largest growth {most[key] if most else '-'}"
            + (f" ({most['name']}#{most['lifetime']})" if most else "")
            + f", tolerance {tol}"
            + (f"; grew: {_labels(grew)}" if grew else "")
            + (f"; across lifetimes: {cross}" if cross else ""),
        )
    passed = all(c["result"] == PASS for c in checks.values())
    return dict(passed=passed, checks=checks, lifetimes=lives)


# -- the report ---------------------------------------------------------------------------


def markdown(f: dict) -> str:
    """The run as markdown: what ran, the figures, the verdict, each lifetime."""
    o, s, v = f["options"], f.get("soak", {}), f["verdict"]
    cap = f.get("capacity")
    cap_line = (
        f"capacity {cap['requests_per_s']} requests/s ({cap['clients']} clients, closed loop, "
        f"{cap['seconds']} s: {cap['right']} right, {cap['wrong']} wrong, {cap['lost']} lost, "
        f"statuses {cap['statuses'] or 'none'})"
        if cap
        else "capacity not measured (fixed rate)"
    )
    rows = [
        ("model", f["model"]),
        ("load", f"{cap_line}; open loop at **{f['rate_per_s']} requests/s** (Poisson)"),
        (
            "calls",
            f"{s.get('sent')} sent in {s.get('seconds')} s: **{s.get('right')} right, "
            f"{s.get('wrong')} wrong, {s.get('lost')} lost**, {s.get('cancelled_by_caller')} "
            f"cancelled mid-stream by their caller, statuses {s.get('statuses') or 'none'}",
        ),
        (
            "examples checked",
            f"{s.get('examples_checked')} ({f.get('checks', {}).get('compared')} compared with "
            f"the reference, the rest byte-identical to one that was)",
        ),
        (
            "latency (from arrival, right answers)",
            f"p50 {s.get('p50_ms')} ms, p99 {s.get('p99_ms')} ms",
        ),
        (
            "backlog (arrivals waiting for a worker)",
            f"max {s.get('backlog_max')}, mean {s.get('backlog_mean')}",
        ),
        ("clients that vanished (SIGKILLed processes)", f"{f.get('vanishing_clients') or 'none'}"),
    ]
    restarts = f.get("restarts", [])
    lines = [
        f"### Soak of {f['date']} ({f['machine']})",
        "",
        f"{o['replicas']} replicas, {o['duration_s']:.0f} s, a restart every "
        f"{o['restart_every_s']:.0f} s (SIGTERM and SIGKILL in turn), {o['workers']} workers, "
        f"{o['cancel_share'] * 100:.0f} % of calls cancelled mid-stream, a client process "
        f"killed every ~{o['vanish_every_s']:.0f} s. Load average before: "
        f"{f['load_average_before']}; after: {f.get('load_average_after', '?')}.",
        "",
        f"**Verdict: {'PASS' if v['passed'] else 'FAIL'}**",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *[f"| {k} | {c['result']} | {c['detail']} |" for k, c in v["checks"].items()],
        "",
        "| figure | value |",
        "|---|---|",
        *[f"| {k} | {val} |" for k, val in rows],
        "",
        "| restart | at (s) | replica | signal | exit | stop (s) | down (s) |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {i + 1} | {r.get('at_s')} | {r['replica']} | {r['signal']} | "
            f"{r.get('exit_code', r.get('error'))} | {r.get('stop_s')} | {r.get('down_s')} |"
            for i, r in enumerate(restarts)
        ],
        "",
        "| process#lifetime | s | baseline RSS MiB | max after | ratio | slope MiB/h "
        "| fds base / max / growth | threads base / max / growth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in v["lifetimes"]:
        if x["judged"]:
            lines.append(
                f"| {x['name']}#{x['lifetime']} | {x['seconds']} | {x['baseline_rss_mib']} | "
                f"{x['max_rss_after_mib']} | {x['rss_ratio']} | {x['rss_slope_mib_per_h']} | "
                f"{x['baseline_fds']} / {x['max_fds']} / {x['fd_growth']} | "
                f"{x['baseline_threads']} / {x['max_threads']} / {x['thread_growth']} |"
            )
        else:
            lines.append(
                f"| {x['name']}#{x['lifetime']} | {x['seconds']} | {x['why']}; max RSS "
                f"{x['rss_max_mib']} MiB | | | | | |"
            )
    return "\n".join(lines) + "\n"


def svg(f: dict) -> str:
    """RSS, fds and threads over time, one line per process lifetime (a colour per
    process name), restarts as dashed lines: T for SIGTERM, K for SIGKILL."""
    series = [s for s in f.get("series", []) if s["samples"]]
    panels = []
    for key, label, scale in (
        ("rss_kb", "RSS (MiB)", 1 / 1024),
        ("fds", "open fds", 1),
        ("threads", "threads", 1),
    ):
        lines: dict = {}
        for s in sorted(series, key=lambda s: (s["name"], s["lifetime"])):
            points = lines.setdefault(s["name"], [])
            if points:
                points.append(None)  # the next lifetime: a line of its own
            points += [
                (_get(x, "t") / 60, _get(x, key) * scale)
                for x in s["samples"]
                if _get(x, key) is not None
            ]
        panels.append((label, lines))
    restarts = [
        (f"{'T' if r['signal'] == 'SIGTERM' else 'K'}{r['replica']}", r["at_s"] / 60)
        for r in f.get("restarts", [])
        if "at_s" in r
    ]
    return panels_chart(
        panels,
        title="RSS, open fds and threads per process lifetime",
        events=restarts,
        x_label="minutes",
        panel_height=200,
    )
