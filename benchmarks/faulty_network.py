"""The load test across a network that misbehaves (issue 33): `jaxattn serve` and `jaxattn loadtest`
in two network namespaces, with loss, bandwidth, latency, jitter, resets and a partition.

    sudo .venv/bin/python benchmarks/faulty_network.py --small-model --requests 5000 \\
        --clients 64 --loss 1 --rate 400mbit --delay-ms 20 --jitter-ms 10 \\
        --reset-after 300000000:900000000 --stall-after 100000000:400000000 --stall-s 2 \\
        --partition-s 5 --partition-after-s 30
    (the profile recorded in RELIABILITY.md: what scripts/faulty_network.sh runs by default)

The path of every request: `jaxattn loadtest` (client namespace) -> the fault proxy
(`python -m jaxattn.bench.fault_proxy`, client namespace, on its loopback: latency,
jitter, resets, stalls, the partition) -> the veth pair (nftables loss each way,
tc tbf bandwidth; `jaxattn.bench.fault_network`) -> `jaxattn serve` (server
namespace, bound to its veth address). The namespaces are this run's own and are
removed at the end, whatever happens; nothing on the host's network is touched.

Phases: the loadtest compiles every batch shape on the server and computes its
right answers with the faults off (only the proxy's latency and the bandwidth
limit apply); when its shape warm-up is done the loss and the proxy's faults are
armed, so its 200 warm-up requests and the measured run see all of them; the
partition starts `--partition-after-s` seconds into the measured run.
Writes WORKDIR/report.md (the markdown of RELIABILITY.md's "Under a faulty
network") and WORKDIR/figures.json; prints the report.
"""

from __future__ import annotations

import argparse
import json
import os
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


def run(args) -> dict:
    from jaxattn.bench.fault_network import FaultyNetwork, unavailable

    reason = unavailable()
    if reason:
        raise SystemExit(f"faulty_network: cannot run here: {reason}")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    model = ["--model", str(args.model)] if args.model else []
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAXATTN_TOKEN="")
    env.setdefault("JAXATTN_COMPILATION_CACHE", str(work / "jit-cache"))  # shared by both sides
    figures: dict = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=f"{os.cpu_count()} CPUs, {os.uname().machine}, kernel {os.uname().release}",
        load_average_before=" ".join(Path("/proc/loadavg").read_text().split()[:3]),
        profile=dict(
            model=str(args.model or "the embedded all-MiniLM-L6-v2"),
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
        ),
    )
    with FaultyNetwork() as net:
        log(f"namespaces {net.names['client']}, {net.names['server']}")
        if args.rate:
            net.set_rate(args.rate, burst=args.burst)
        serve_log = work / "serve.log"
        with open(serve_log, "wb") as err:
            server = net.popen(
                "server",
                [str(JAXATTN), "serve", *model, "--host", net.server_ip, "--port", "0"],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                cwd=work,
            )
        port = first_line(server, f"listening on {net.server_ip}:", "jaxattn serve")
        log(f"server {server.pid} listening on {net.server_ip}:{port}")
        proxy_args = ["--target", f"{net.server_ip}:{port}", "--calm", "--seed", str(args.seed)]
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
        proxy_address = first_line(proxy, "listening on ", "the fault proxy")
        proxy_lines: list[str] = []
        threading.Thread(target=lambda: proxy_lines.extend(proxy.stdout), daemon=True).start()
        log(f"fault proxy {proxy.pid} on {proxy_address} (client namespace)")
        load_json = work / "loadtest.json"
        load = net.popen(
            "client",
            [str(JAXATTN), "loadtest", "--server", proxy_address, *model]
            + ["--server-pid", str(server.pid), "--clients", str(args.clients)]
            + ["--requests", str(args.requests), "--seed", str(args.seed)]
            + ["--json", str(load_json), "--overwrite"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=work,
        )
        events: dict = {}
        for line in load.stderr:
            sys.stderr.write(line)
            if "shape warm-up requests sent" in line and "armed" not in events:
                net.set_loss(args.loss)
                proxy.send_signal(signal.SIGUSR1)
                events["armed"] = time.monotonic()
                log(f"faults armed: {args.loss} % loss, proxy faults on")
            elif line.split("] ", 1)[-1].startswith("warm-up:") and "measuring" not in events:
                events["measuring"] = time.monotonic()
                if args.partition_s > 0:
                    timer = threading.Timer(
                        args.partition_after_s, proxy.send_signal, (signal.SIGUSR2,)
                    )
                    timer.daemon = True
                    timer.start()
        load.wait()
        seen, dropped = net.packets() if "armed" in events else (0, 0)
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(30)
        time.sleep(0.5)  # the reader thread takes the proxy's last line
    figures["loadtest_exit_status"] = load.returncode
    figures["loadtest"] = json.loads(load_json.read_text()) if load_json.is_file() else None
    counts = [json.loads(x) for x in proxy_lines if x.startswith("{")]
    figures["proxy"] = counts[-1] if counts else None
    figures["proxy_events"] = [x.strip() for x in proxy_lines if not x.startswith("{")]
    figures["packets"] = dict(seen=seen, dropped=dropped)
    figures["server_statuses"] = statuses(serve_log)
    return figures


def report(f: dict) -> str:
    p, lt = f["profile"], f["loadtest"] or {}
    rss = lt.get("rss_mib") or {}
    kinds = ", ".join(
        f"{k} {v['n']} ({v['p50_ms']:.0f} / {v['p99_ms']:.0f} ms)"
        for k, v in lt.get("by_kind", {}).items()
    )
    px = f["proxy"] or {}
    rows = [
        (
            "requests",
            f"**{lt.get('requests')}** ({lt.get('examples')} examples) in {lt.get('elapsed_s')} s",
        ),
        (
            "right answers",
            f"**{lt.get('ok')}**; **{lt.get('wrong')} wrong, {lt.get('lost')} lost**",
        ),
        ("errors by status code (client)", f"{lt.get('errors') or 'none'}"),
        ("latency, right answers", f"**p50 {lt.get('p50_ms')} ms, p99 {lt.get('p99_ms')} ms**"),
        ("latency by kind (p50 / p99)", kinds),
        (
            "server RSS over the measured run",
            f"start **{rss.get('start')} MiB**, max {rss.get('max')} MiB, "
            f"end **{rss.get('end')} MiB**",
        ),
        (
            "TCP packets on the link once armed (warm-up and run)",
            f"{f['packets']['seen']}, {f['packets']['dropped']} dropped",
        ),
        (
            "proxy (whole run)",
            f"{px.get('connections')} connections, {px.get('resets', 0)} resets, "
            f"{px.get('stalls', 0)} stalls, {px.get('partitions', 0)} partition(s), "
            f"{px.get('bytes_down', 0) / 2**20:.0f} MiB down",
        ),
        ("server's Capture calls by status (whole life)", f"{f['server_statuses']}"),
    ]
    resets = f"resets after {p['reset_after']} bytes" if p["reset_after"] else "no resets"
    stalls = (
        f"{p['stall_s']} s stalls after {p['stall_after']} bytes"
        if p["stall_after"]
        else "no stalls"
    )
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"""### Run of {f["date"]} ({f["machine"]})

Profile: {p["requests"]} requests from {p["clients"]} clients, model {p["model"]};
{p["loss_percent"]} % TCP loss each way (nftables), bandwidth {p["rate"] or "unlimited"} (tbf),
latency {p["delay_ms"]} +- {p["jitter_ms"]} ms each way, {resets}, {stalls}, one
{p["partition_s"]} s partition {p["partition_after_s"]} s into the measured run.
Load average before: {f["load_average_before"]}.

| figure | value |
|---|---|
{table}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=48)
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
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/jaxattn-faulty-network"))
    args = parser.parse_args()
    if args.small_model:
        args.workdir.mkdir(parents=True, exist_ok=True)
        args.model = small_model(args.workdir)
    figures = run(args)
    (args.workdir / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    text = report(figures)
    (args.workdir / "report.md").write_text(text)
    print(text)
    lt = figures["loadtest"] or {}
    return 0 if lt and not lt["wrong"] and not lt["lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
