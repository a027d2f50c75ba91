"""Soak (issue 33): replicas restarted under open-loop load at 70 % of capacity, clients vanishing.

    .venv/bin/python benchmarks/soak.py --small-model --duration 7200 --restart-every 10
        [--workdir /tmp/jaxattn-soak] [--replicas 3] [--load-fraction 0.7] ...
    (scripts/soak.sh runs the recorded 2-hour profile; RELIABILITY.md, "Soak")

Starts `--replicas` `jaxattn serve` processes (default options, the embedded
all-MiniLM-L6-v2 or, with --small-model, benchmarks/faulty_network.py's random
6-layer BERT) on loopback, one compilation cache for all; builds the load test's
mix (`jaxattn.bench.mix`) and its right answers in-process; compiles every shape
on each replica; measures capacity (closed loop, `--capacity-clients`,
`--capacity-s`); then runs open loop (Poisson) at `--load-fraction` of it for
`--duration` seconds while one replica at a time is stopped every
`--restart-every` minutes (SIGTERM and SIGKILL in turn) and restarted on its
port, `--cancel-share` of the calls are closed mid-stream by their caller and a
client process is SIGKILLed mid-call every ~`--vanish-every` seconds; samples
every process's RSS, fds and threads every second. The driver is
`jaxattn.bench.soak`, the verdict `jaxattn.bench.soak_report`.

Writes WORKDIR/soak.json (figures, verdict, every sample), WORKDIR/soak.md (the
summary for RELIABILITY.md), WORKDIR/soak.svg (RSS, fds and threads over time per
process lifetime) and WORKDIR/samples.csv (as it goes); prints the summary.
Exit status 0 when every check passes, 1 otherwise. Ctrl-C (or SIGTERM) ends the
load early and still writes the report (a second one stops at once).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from pathlib import Path


def main(argv=None) -> int:
    from jaxattn.bench.soak import SoakOptions

    d = SoakOptions()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=d.duration_s, help="seconds of open loop")
    ap.add_argument(
        "--restart-every", type=float, default=d.restart_every_s / 60, help="minutes; 0: none"
    )
    ap.add_argument("--replicas", type=int, default=d.replicas)
    ap.add_argument("--load-fraction", type=float, default=d.load_fraction)
    ap.add_argument("--rate", type=float, default=None, help="arrivals/s (skips the capacity)")
    ap.add_argument("--capacity-s", type=float, default=d.capacity_s)
    ap.add_argument("--capacity-clients", type=int, default=d.capacity_clients)
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--cancel-share", type=float, default=d.cancel_share)
    ap.add_argument("--vanish-every", type=float, default=d.vanish_every_s, help="seconds; 0: none")
    ap.add_argument("--timeout", type=float, default=d.timeout_s, help="each call's deadline")
    ap.add_argument("--warm-s", type=float, default=d.warm_s)
    ap.add_argument("--baseline-s", type=float, default=d.baseline_s)
    ap.add_argument("--model", type=Path, default=None, help="default: embedded MiniLM")
    ap.add_argument(
        "--small-model",
        action="store_true",
        help="a random 6-layer, 12-head, hidden-48 BERT (benchmarks/faulty_network.py)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/jaxattn-soak"))
    args = ap.parse_args(argv)

    import jaxattn
    from jaxattn.bench.expect import build_expectations
    from jaxattn.bench.mix import build_mix, sentences, warm_shapes
    from jaxattn.bench.sentences import DEFAULT_CONLLU
    from jaxattn.bench.soak import log, run_soak
    from jaxattn.bench.soak_report import markdown, svg

    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.small_model:
        from faulty_network import small_model  # beside this script

        args.model = small_model(args.workdir)
    options = dataclasses.replace(
        d,
        duration_s=args.duration,
        restart_every_s=args.restart_every * 60,
        replicas=args.replicas,
        load_fraction=args.load_fraction,
        rate=args.rate,
        capacity_s=args.capacity_s,
        capacity_clients=args.capacity_clients,
        workers=args.workers,
        cancel_share=args.cancel_share,
        vanish_every_s=args.vanish_every,
        timeout_s=args.timeout,
        warm_s=args.warm_s,
        baseline_s=args.baseline_s,
        seed=args.seed,
        serve_args=(),  # `jaxattn serve`'s defaults, as the load test
    )
    engine = jaxattn.load(args.model)
    mix = build_mix(engine, sentences(engine, DEFAULT_CONLLU))
    log(f"mix: {len(mix)} request kinds over {sum(len(r.texts) for r in mix)} texts")

    def expectations():
        log("computing the right answers in-process")
        return build_expectations(engine, mix)  # every batch size `jaxattn serve` may run

    stop_early = threading.Event()  # Ctrl-C or SIGTERM: end the load, write the report

    def interrupt(signum, frame) -> None:
        if stop_early.is_set():
            raise KeyboardInterrupt  # a second one: stop at once
        stop_early.set()

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    figures = run_soak(
        args.workdir,
        mix,
        expectations,
        options,
        model=args.model,
        warm=lambda client: warm_shapes(client, engine, mix),
        stop_early=stop_early,
    )
    figures["load_average_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    (args.workdir / "soak.json").write_text(json.dumps(figures) + "\n")
    text = markdown(figures)
    (args.workdir / "soak.md").write_text(text)
    (args.workdir / "soak.svg").write_text(svg(figures))
    print(text)
    log(f"report: {args.workdir}/soak.md, soak.json, soak.svg, samples.csv")
    return 0 if figures["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
