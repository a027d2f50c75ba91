"""`jaxattn loadtest`: many concurrent clients against a server, every answer checked.

    jaxattn serve &                                   # the embedded model
    jaxattn loadtest --server 127.0.0.1:50051 --clients 64 --requests 10000

The mix and the driver are `jaxattn.bench.mix`; the clients
`jaxattn.bench.load_generator`. Errors are counted by status code; the server's RSS
is sampled from /proc/PID/status (the pid is found from the port, or given).
benchmarks/loadtest.py starts the server and records the figures.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from jaxattn import outfile
from jaxattn.bench.sentences import DEFAULT_CONLLU
from jaxattn.cli.args import (
    add_overwrite_argument,
    add_token_argument,
    check_output,
    ensure_parent,
    non_negative,
    positive,
    positive_float,
    read_token,
)
from jaxattn.cli.corpus import check_corpus
from jaxattn.cli.model_arg import MODEL_HELP, MODEL_METAVAR, model


def register(sub) -> None:
    p = sub.add_parser(
        "loadtest",
        help="load-test a server with many clients, checking every answer",
        description="Send a realistic mix of requests from many concurrent clients for a "
        "bounded time or count, check every answer against an in-process engine, and report "
        "requests/s, p50/p99 latency, errors by status code and the server's RSS over time.",
    )
    p.add_argument("--server", required=True, metavar="HOST:PORT", help="the server to load")
    p.add_argument("--clients", type=positive, default=64, help="concurrent clients (threads)")
    p.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        help="stop after S seconds (give --requests, --duration or both)",
    )
    p.add_argument(
        "--requests",
        type=positive,
        default=None,
        help="stop after N requests (give --requests, --duration or both)",
    )
    p.add_argument(
        "--warmup",
        type=non_negative,
        default=200,
        help="requests sent (and checked) before measuring, after every batch "
        "shape was compiled once",
    )
    p.add_argument(
        "--model",
        type=model,
        metavar=MODEL_METAVAR,
        help=f"the server's model, for the right answers: {MODEL_HELP} (default: the embedded "
        "all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--conllu",
        type=Path,
        default=DEFAULT_CONLLU,
        help="sentences to draw from, any input format (default: the UD English "
        "EWT dev split shipped with jaxattn)",
    )
    p.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="pid whose RSS to sample (default: the local one on the port)",
    )
    add_token_argument(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the request mix (default 0)")
    p.add_argument("--json", default=None, help="also write the figures here")
    add_overwrite_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from jaxattn.bench.mix import loadtest

    if args.json:
        check_output(args.json, args.overwrite, "--json")
    check_corpus(args.conllu, "--conllu")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    result, _, _ = loadtest(
        args.server,
        clients=args.clients,
        requests=args.requests,
        duration=args.duration,
        warmup=args.warmup,
        model=args.model,
        conllu=args.conllu,
        server_pid=args.server_pid,
        token=read_token(args.token_file),
        seed=args.seed,
        log=log,
    )
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.json:
        summary["rss_samples"] = [(round(t, 1), kb, n) for t, kb, n in result.rss]
        outfile.write_text(ensure_parent(args.json), json.dumps(summary, indent=2) + "\n")
    return 0 if not result.wrong and not result.lost else 1
