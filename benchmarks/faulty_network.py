"""The load test across a network that misbehaves (issue 33): `jaxattn serve` replicas and the
load in two network namespaces, with loss, bandwidth, latency, jitter, resets and a partition.

    sudo .venv/bin/python benchmarks/faulty_network.py --small-model --replicas 3 \\
        --requests 100000 --clients 256 --loss 1 --rate 400mbit --delay-ms 20 --jitter-ms 10 \\
        --reset-after 80000000:240000000 --stall-after 20000000:80000000 --stall-s 2 \\
        --partition-s 5 --partition-after-s 30
    (the target profile: what scripts/faulty_network.sh runs by default). The reset and
    stall thresholds are per connection, and each simulated client has one to every
    replica (hundreds of connections, each carrying less than one did before), so they
    are tens to hundreds of MB, and above the largest answer (a 512-token float32
    attention of the small model, 75 MB): a connection reset before one example is
    through would never let it through.

The path of every request: the load generator (client namespace; each simulated
client its own `AttentionClient` of all the replicas' addresses, on connections
of its own: round-robin, retry, resume of cut streams) -> the fault proxy of
replica k (`python -m jaxattn.bench.fault_proxy`, client namespace, on its
loopback: latency, jitter, resets, stalls, the partition) -> the veth pair
(nftables loss each way, tc tbf bandwidth; `jaxattn.bench.fault_network`) ->
`jaxattn serve` replica k (server namespace, bound to its veth address, a port
of its own; all replicas share one compilation cache). One proxy per replica,
not one proxy on N ports: the proxy's command line already takes one target,
each replica's connections get their own faults (a reset on the path to one
replica is what its clients resume from on another), and the proxies' work
spreads over processes. The partition cuts all of them at once: it is the
link between the namespaces that parts. The namespaces are this run's own and
are removed at the end, whatever happens; nothing on the host's network is
touched.

Phases: the load side compiles every batch shape on every replica and computes
its right answers with the faults off (only the proxies' latency and the
bandwidth limit apply); when its shape warm-up is done the loss and the
proxies' faults are armed, so its warm-up requests and the measured run see
all of them; the partition starts `--partition-after-s` seconds into the
measured run. Every second, each replica's, proxy's and the load generator's
RSS, open file descriptors and threads are sampled (`jaxattn.bench.proc_sampler`).

Writes WORKDIR/report.md (the markdown of RELIABILITY.md's "Under a faulty
network"), WORKDIR/figures.json, WORKDIR/rss.svg and WORKDIR/handles.svg (the
samples over time, the events marked); prints the report. Exit status 0 when
nothing was wrong or lost and every status seen was a designed one.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAXATTN = Path(sys.executable).with_name("jaxattn")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def small_model(workdir: Path) -> Path:
    """A random BERT with MiniLM's heads and the mix's layers, small and cheap to compute.

    6 layers x 12 heads (the mix's rich requests ask for layers 0, 5 and heads 1, 11),
    hidden 48, 512 positions (its long texts are 480-510 tokens), the test fixtures'
    WordPiece tokenizer (tests/hf_fixtures.py: unknown words are spelled in letters).
    """
    out = workdir / "small-bert"
    if not (out / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        from hf_fixtures import make_checkpoint

        make_checkpoint(
            "bert",
            out,
            num_hidden_layers=6,
            num_attention_heads=12,
            hidden_size=48,
            intermediate_size=96,
            max_position_embeddings=512,
        )
    return out


# Status codes the servers' Capture calls may end with by design under this load:
# CANCELLED (the client cancelled, or its connection was reset), DEADLINE_EXCEEDED
# (a deadline request), RESOURCE_EXHAUSTED (overload). The client's designed set is
# jaxattn.bench.load_generator's (DESIGNED, and DEADLINE_EXCEEDED on deadline requests).
SERVER_DESIGNED = ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")
RSS_TARGET = 1.5  # RSS within 1.5x of its value after the warm-up (issue 33)


def first_line(proc: subprocess.Popen, says: str, what: str) -> str:
    line = proc.stdout.readline()
    if says not in line:
        raise RuntimeError(f"{what} did not start: {line!r}")
    return line.split(says, 1)[1].split()[0]


def statuses(serve_log: Path) -> dict:
    counts: dict = {}
    for line in serve_log.read_text().splitlines():
        if " Capture peer=" in line:
            code = line.split("status=")[1].split()[0]
            counts[code] = counts.get(code, 0) + 1
    return counts


def profile_of(args) -> dict:
    return dict(
        model=str(args.model or "the embedded all-MiniLM-L6-v2"),
        replicas=args.replicas,
        requests=args.requests,
        clients=args.clients,
        loss_percent=args.loss,
        rate=args.rate,
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        reset_after=args.reset_after,
        stall_after=args.stall_after,
        stall_s=args.stall_s,
        partition_s=args.partition_s,
        partition_after_s=args.partition_after_s,
        serve_args=args.serve_args,
        malloc={k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
    )


def start_replicas(net, args, env: dict, work: Path) -> list[tuple[subprocess.Popen, str]]:
    """`--replicas` `jaxattn serve` processes in the server namespace: (process, port) each."""
    model = ["--model", str(args.model)] if args.model else []
    procs = []
    for k in range(args.replicas):
        with open(work / f"serve-{k}.log", "wb") as err:
            procs.append(
                net.popen(
                    "server",
                    [str(JAXATTN), "serve", *model, "--host", net.server_ip, "--port", "0"]
                    + shlex.split(args.serve_args),
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env=env,
                    cwd=work,
                )
            )
    return [(p, first_line(p, f"listening on {net.server_ip}:", "jaxattn serve")) for p in procs]


def start_proxy(net, args, target: str, k: int, env: dict):
    """Replica k's fault proxy in the client namespace: (process, address, its output lines)."""
    proxy_args = ["--target", target, "--calm", "--seed", str(args.seed * 1000 + k)]
    proxy_args += ["--delay-ms", str(args.delay_ms), "--jitter-ms", str(args.jitter_ms)]
    proxy_args += ["--partition-s", str(args.partition_s)]
    if args.reset_after:
        proxy_args += ["--reset-after", args.reset_after]
    if args.stall_after:
        proxy_args += ["--stall-after", args.stall_after, "--stall-s", str(args.stall_s)]
    proxy = net.popen(
        "client",
        [sys.executable, "-m", "jaxattn.bench.fault_proxy", *proxy_args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    address = first_line(proxy, "listening on ", "the fault proxy")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proxy.stdout), daemon=True).start()
    return proxy, address, lines


def run(args) -> dict:
    from jaxattn.bench.fault_network import FaultyNetwork, unavailable
    from jaxattn.bench.proc_sampler import ProcSampler

    reason = unavailable()
    if reason:
        raise SystemExit(f"faulty_network: cannot run here: {reason}")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAXATTN_TOKEN="")
    env.setdefault("JAXATTN_COMPILATION_CACHE", str(work / "jit-cache"))  # shared by all
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    figures: dict = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=f"{os.cpu_count()} CPUs, {os.uname().machine}, kernel {os.uname().release}",
        load_average_before=" ".join(Path("/proc/loadavg").read_text().split()[:3]),
        profile=profile_of(args),
    )
    t_start = time.monotonic()
    events: dict[str, float] = {}  # name -> seconds on the sampler's clock, the first time

    def mark(event: str) -> None:
        events.setdefault(event, sampler.now())

    with FaultyNetwork() as net, ProcSampler() as sampler:
        log(f"namespaces {net.names['client']}, {net.names['server']}")
        if args.rate:
            net.set_rate(args.rate, burst=args.burst)
        replicas = start_replicas(net, args, env, work)
        proxies = []
        for k, (server, port) in enumerate(replicas):
            sampler.track(f"replica {k}", server.pid)
            proxy, address, lines = start_proxy(net, args, f"{net.server_ip}:{port}", k, env)
            sampler.track(f"proxy {k}", proxy.pid)
            proxies.append((proxy, address, lines))
            log(f"replica {k}: pid {server.pid} on {net.server_ip}:{port}, proxy {address}")
        load_json = work / "loadtest.json"
        load_json.unlink(missing_ok=True)  # never a previous run's figures
        model = ["--model", str(args.model)] if args.model else []
        load = net.popen(
            "client",
            [sys.executable, __file__, "--load-side", ",".join(a for _, a, _ in proxies)]
            + ["--server-pid", str(replicas[0][0].pid), "--clients", str(args.clients)]
            + ["--requests", str(args.requests), "--seed", str(args.seed)]
            + ["--warmup", str(args.warmup), "--json", str(load_json), *model],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # Hundreds of threads each freeing MiB-sized answers: glibc's per-thread
            # arenas would keep what they free (RSS growing with the client count).
            env=dict(env, MALLOC_ARENA_MAX="2"),
            cwd=work,
        )
        sampler.track("load generator", load.pid)
        timer = None
        for line in load.stderr:
            sys.stderr.write(line)
            if "shape warm-up requests sent" in line and "armed" not in events:
                net.set_loss(args.loss)
                for proxy, _, _ in proxies:
                    proxy.send_signal(signal.SIGUSR1)
                mark("armed")
                log(f"faults armed: {args.loss} % loss, proxy faults on")
            elif line.split("] ", 1)[-1].startswith("warm-up:"):
                mark("measuring")
                if args.partition_s > 0 and timer is None:

                    def partition() -> None:
                        mark("partition")
                        for proxy, _, _ in proxies:
                            proxy.send_signal(signal.SIGUSR2)

                    timer = threading.Timer(args.partition_after_s, partition)
                    timer.daemon = True
                    timer.start()
        load.wait()
        if timer is not None:
            timer.cancel()
        mark("end")
        sampler.sample_once()
        seen, dropped = net.packets() if "armed" in events else (0, 0)
        for proxy, _, _ in proxies:
            proxy.send_signal(signal.SIGTERM)
        for proxy, _, _ in proxies:
            proxy.wait(30)
        time.sleep(0.5)  # the reader threads take the proxies' last lines
    figures["wall_s"] = round(time.monotonic() - t_start, 1)
    figures["loadtest_exit_status"] = load.returncode
    figures["loadtest"] = json.loads(load_json.read_text()) if load_json.is_file() else None
    figures["proxies"] = []
    for _, _, lines in proxies:
        counts = [json.loads(x) for x in lines if x.startswith("{")]
        figures["proxies"].append(counts[-1] if counts else {})
    figures["proxy_events"] = [
        f"proxy {k}: {x.strip()}"
        for k, (_, _, lines) in enumerate(proxies)
        for x in lines
        if not x.startswith("{")
    ]
    figures["packets"] = dict(seen=seen, dropped=dropped)
    figures["server_statuses"] = [statuses(work / f"serve-{k}.log") for k in range(args.replicas)]
    figures["events_s"] = {k: round(v, 1) for k, v in events.items()}
    figures["samples"] = sorted(  # (t, name, RSS kB, fds, threads), in time order
        (
            (round(x.t, 1), s.name, x.rss_kb, x.fds, x.threads)
            for s in sampler.series
            for x in s.samples
        ),
        key=lambda row: row[0],
    )
    return figures


def resources(f: dict) -> dict:
    """Per process: RSS start (after the warm-up) / max / end, fds and threads
    (`proc_sampler.growth` over the measured run)."""
    from jaxattn.bench.proc_sampler import Sample, growth

    by_name: dict[str, list[Sample]] = {}
    for t, name, kb, fds, threads in f["samples"]:
        by_name.setdefault(name, []).append(Sample(t, kb, fds, threads))
    since, until = f["events_s"].get("measuring", 0.0), f["events_s"].get("end")
    figures = {name: growth(xs, since=since, until=until) for name, xs in by_name.items()}
    return {name: g for name, g in figures.items() if g is not None}


def flagged(f: dict) -> dict:
    """The statuses seen that are not designed ones: client ("kind: CODE"), server (CODE)."""
    lt = f["loadtest"] or {}
    server: dict = {}
    for counts in f["server_statuses"]:
        for code, n in counts.items():
            if code not in SERVER_DESIGNED:
                server[code] = server.get(code, 0) + n
    return {"client": lt.get("undesigned", {}), "server": server}


def plots(f: dict, out: Path) -> list[Path]:
    """rss.svg (RSS in MiB) of every process sampled and handles.svg (open fds and threads,
    a panel each) of the replicas and the load generator."""
    from jaxattn.bench.svg_series import line_chart, panels_chart

    events = f["events_s"]
    names = list(dict.fromkeys(s[1] for s in f["samples"]))

    def lines(column: int, scale: float = 1.0, proxies: bool = True) -> dict:
        return {
            n: [
                (s[0], s[column] * scale)
                for s in f["samples"]
                if s[1] == n and s[column] is not None
            ]
            for n in names
            if proxies or not n.startswith("proxy")
        }

    p = f["profile"]
    what = f"{p['requests']} requests, {p['clients']} clients, {p['replicas']} replica(s)"
    files = [out / "rss.svg", out / "handles.svg"]
    files[0].write_text(
        line_chart(
            lines(2, 1 / 1024),
            title=f"RSS, sampled every second ({what})",
            events=events,
            y_label="MiB",
        )
    )
    handles = [("open fds", lines(3, proxies=False)), ("threads", lines(4, proxies=False))]
    files[1].write_text(
        panels_chart(handles, title=f"Open file descriptors and threads ({what})", events=events)
    )
    return files


def report(f: dict) -> str:
    p, lt = f["profile"], f["loadtest"] or {}
    kinds = ", ".join(
        f"{k} {v['n']} ({v['p50_ms']:.0f} / {v['p99_ms']:.0f} ms)"
        for k, v in lt.get("by_kind", {}).items()
    )
    px: dict = {}
    for counts in f["proxies"]:
        for key, value in counts.items():
            px[key] = px.get(key, 0) + value
    res, bad = resources(f), flagged(f)
    proc_rows = [
        (
            name,
            f"{r['rss_mib']['start']} / {r['rss_mib']['max']} / {r['rss_mib']['end']} MiB "
            f"(max {r['rss_max_over_start']:.2f}x start"
            + (
                f", {'within' if r['rss_max_over_start'] <= RSS_TARGET else 'OVER'} {RSS_TARGET}x)"
                if name.startswith("replica")  # the target is the servers'
                else ")"
            ),
            f"{r['fds']['start']} -> {r['fds']['end']} (max {r['fds']['max']})",
            f"{r['threads']['start']} -> {r['threads']['end']} (max {r['threads']['max']})",
        )
        for name, r in res.items()
    ]
    server_total: dict = {}
    for counts in f["server_statuses"]:
        for code, n in counts.items():
            server_total[code] = server_total.get(code, 0) + n
    rows = [
        (
            "requests",
            f"**{lt.get('requests')}** ({lt.get('examples')} examples) in {lt.get('elapsed_s')} s, "
            f"{lt.get('requests_per_s')} requests/s",
        ),
        (
            "right answers",
            f"**{lt.get('ok')}** (of which {lt.get('cancelled', 0)} cancelled by the client "
            f"after checking what came); **{lt.get('wrong')} wrong, {lt.get('lost')} lost**",
        ),
        ("errors by status code (client)", f"{lt.get('errors') or 'none'}"),
        (
            "statuses not designed",
            f"client {bad['client'] or 'none'}, server {bad['server'] or 'none'}",
        ),
        ("latency, right answers", f"**p50 {lt.get('p50_ms')} ms, p99 {lt.get('p99_ms')} ms**"),
        ("latency by kind (p50 / p99)", kinds),
        (
            "TCP packets on the link once armed (warm-up and run)",
            f"{f['packets']['seen']}, {f['packets']['dropped']} dropped",
        ),
        (
            f"proxies ({len(f['proxies'])}, whole run)",
            f"{px.get('connections')} connections, {px.get('resets', 0)} resets, "
            f"{px.get('stalls', 0)} stalls, {px.get('partitions', 0)} partition(s), "
            f"{px.get('bytes_down', 0) / 2**20:.0f} MiB down",
        ),
        (
            "servers' Capture calls by status (whole life)",
            f"{server_total} (per replica: {f['server_statuses']})",
        ),
        ("wall time of the whole run", f"{f['wall_s']} s"),
    ]
    resets = f"resets after {p['reset_after']} bytes" if p["reset_after"] else "no resets"
    stalls = (
        f"{p['stall_s']} s stalls after {p['stall_after']} bytes"
        if p["stall_after"]
        else "no stalls"
    )
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    proc_table = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in proc_rows)
    return f"""### Run of {f["date"]} ({f["machine"]})

Profile: {p["requests"]} requests from {p["clients"]} clients to {p["replicas"]} replica(s),
model {p["model"]}, `jaxattn serve {p.get("serve_args", "")}`
(environment {p.get("malloc") or "as is"}); {p["loss_percent"]} % TCP loss each way
(nftables), bandwidth {p["rate"] or "unlimited"} (tbf), latency {p["delay_ms"]} +-
{p["jitter_ms"]} ms each way,
{resets}, {stalls}, one {p["partition_s"]} s partition {p["partition_after_s"]} s into the
measured run. Load average before: {f["load_average_before"]}.

| figure | value |
|---|---|
{table}

Processes over the measured run (sampled every second; start = the first sample after
the warm-up, end = the last one, once the load generator's clients had closed their
connections; the 1.5x target is the replicas'; plotted in rss.svg and handles.svg):

| process | RSS start / max / end | open fds start -> end | threads start -> end |
|---|---|---|---|
{proc_table}
"""


def load_side(args) -> int:
    """The load generator's half, run in the client namespace (`--load-side ADDRESSES`)."""
    from jaxattn.bench.mix import loadtest

    servers = args.load_side.split(",")
    result, _, _ = loadtest(
        servers,
        clients=args.clients,
        requests=args.requests,
        warmup=args.warmup,
        model=args.model,
        server_pid=args.server_pid,
        seed=args.seed,
        log=log,
    )
    summary = result.summary()
    summary["rss_samples"] = [(round(t, 1), kb, n) for t, kb, n in result.rss]
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if not result.wrong and not result.lost else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1, help="jaxattn serve processes")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=200, help="requests before measuring")
    parser.add_argument("--model", type=Path, default=None, help="default: embedded MiniLM")
    parser.add_argument(
        "--small-model",
        action="store_true",
        help="a random 6-layer, 12-head, hidden-48 BERT (cheap compute: the network is tested)",
    )
    parser.add_argument("--loss", type=float, default=1.0, help="percent of TCP packets")
    parser.add_argument("--rate", default=None, help="tc tbf rate, e.g. 400mbit")
    parser.add_argument("--burst", default="1mb", help="tc tbf burst")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--jitter-ms", type=float, default=10.0)
    parser.add_argument("--reset-after", default=None, metavar="LO:HI", help="bytes")
    parser.add_argument("--stall-after", default=None, metavar="LO:HI", help="bytes")
    parser.add_argument("--stall-s", type=float, default=2.0)
    parser.add_argument("--partition-s", type=float, default=5.0, help="0: no partition")
    parser.add_argument("--partition-after-s", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--serve-args",
        default="",
        help="more options for each `jaxattn serve`, e.g. '--max-buffered-mib 256'",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/jaxattn-faulty-network"))
    # The load generator's half, started by the run itself in the client namespace.
    parser.add_argument("--load-side", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_side:
        return load_side(args)
    if args.replicas < 1:
        parser.error(f"--replicas must be at least 1, not {args.replicas}")
    if args.small_model:
        args.workdir.mkdir(parents=True, exist_ok=True)
        args.model = small_model(args.workdir)
    figures = run(args)
    (args.workdir / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    plots(figures, args.workdir)
    text = report(figures)
    (args.workdir / "report.md").write_text(text)
    print(text)
    lt = figures["loadtest"] or {}
    bad = flagged(figures)
    ok = lt and not lt["wrong"] and not lt["lost"] and not bad["client"] and not bad["server"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
