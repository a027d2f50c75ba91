"""Generation through the service (issue 30): its cost against the local engine, and how
long a plain capture waits behind a long generation.

    .venv/bin/python benchmarks/service_generate.py [--new N] [--rounds R]
    .venv/bin/python benchmarks/service_generate.py --stagger S [--clients C] [--synthetic P]

The tiny random GPT-2 of the tests (64 positions), three prompts continued by N
tokens (EOS ignored) then captured (attention): the local `Engine.capture(generate=N)`
and a client's `capture(..., generate=N)` through an in-process server, the median
of R calls each after a compiling one. Then, R times, a one-text plain capture sent
while another thread's generation runs: its latency, next to the same capture alone.
The server runs a generation a step per batcher turn; the same figures with the
whole generation in one turn (the worker's step patched to loop, in this process
only) show what the turns buy.

`--stagger S`: only the staggered arrivals instead: C clients, client k sending its
generation k*S seconds after the first, with a generating call joining the run under
way (`SharedGeneration.join`: continuous batching) and without (the server's
`join_generations=False`): the wall time from the first call to the last answer and the
mean of the clients' own latencies, the median of R.
"""

from __future__ import annotations

import argparse
import functools
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "families")]

PROMPTS = ["The quick brown fox", "Hello, world. Hello,", "a"]


def _median_ms(f, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _whole_turns() -> None:
    """Patch the batcher's step so one turn runs a generation to its end (the baseline)."""
    from service.micro_batching import MicroBatcher

    step = MicroBatcher._generate

    def whole(self, job):
        run = job.generation
        original = run.step

        def loop(engine):
            made, sequences = original(engine)
            while sequences is None:
                more, sequences = original(engine)
                made += more
            return made, sequences

        run.step = loop
        step(self, job)

    MicroBatcher._generate = whole


def measure(engine, new: int, rounds: int) -> dict:
    from local_server import running_server

    from jaxattn.client import AttentionClient

    kw = dict(what=["attention"], generate=new, stop_at_eos=False)
    plain = dict(what=["attention"])
    with running_server(engine, max_new_tokens=new) as (_, address):
        with AttentionClient(address, timeout=300) as client:
            client.capture(PROMPTS, **kw)
            client.capture(["hello world"], **plain)
            served = _median_ms(lambda: client.capture(PROMPTS, **kw), rounds)
            alone = _median_ms(lambda: client.capture(["hello world"], **plain), rounds)
            during = []
            for _ in range(rounds):
                started = threading.Event()

                def generate(started=started):
                    started.set()
                    client.capture(PROMPTS, **kw)

                thread = threading.Thread(target=generate)
                thread.start()
                started.wait()
                time.sleep(served / 1e3 / 8)  # the generation is under way
                during.append(_median_ms(lambda: client.capture(["hello world"], **plain), 1))
                thread.join()
    return dict(served=served, alone=alone, during=statistics.median(during))


def _wave(conns, texts, kw) -> None:
    """Each client captures its text with `kw` (a generation), all starting together."""
    go = threading.Barrier(len(texts))

    def one(client, text):
        go.wait()
        client.capture([text], **kw)

    threads = [threading.Thread(target=one, args=ct) for ct in zip(conns, texts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def concurrent(engine, new: int, clients: int, rounds: int) -> dict:
    """Wall time of `clients` threads, each its own client generating `new` tokens from its
    own prompt at the same moment, the median of `rounds`; with the batcher's merging of
    waiting generations (`service.generation.merge`) and joining (`join_generations=True`,
    whatever the platform: the server's default joins on an accelerator only) and without
    either (`micro_batching=False, join_generations=False`: each call its own run), same
    server process."""
    from local_server import running_server

    from jaxattn.client import AttentionClient

    texts = [f"{PROMPTS[i % len(PROMPTS)]} {i}" for i in range(clients)]
    kw = dict(what=["attention"], generate=new, stop_at_eos=False)
    out = {}
    for name, shared in (("merged", True), ("alone", False)):
        options = dict(micro_batching=shared, join_generations=shared)
        with running_server(engine, max_new_tokens=new, **options) as (_, address):
            conns = [AttentionClient(address, timeout=300) for _ in texts]
            try:
                wave = functools.partial(_wave, conns, texts, kw)
                wave()  # compiles
                out[name] = _median_ms(wave, rounds)
            finally:
                for c in conns:
                    c.close()
    return out


def staggered(engine, new: int, clients: int, stagger: float, rounds: int) -> dict:
    """{"joined" | "alone": (wall ms from the first call to the last answer, mean ms of
    each client's own latency)}, each the median of `rounds`: client k sends its
    generation of `new` tokens `k * stagger` s after the first."""
    from local_server import running_server

    from jaxattn.client import AttentionClient

    texts = [f"{PROMPTS[i % len(PROMPTS)]} {i}" for i in range(clients)]
    kw = dict(what=["attention"], generate=new, stop_at_eos=False)
    # every batch size of the clients' cache length and each growth: no compile measured
    from jaxattn.engine.kv_cache import Shape

    d = engine.kv_decoder
    length = d.cache_length(max(d.need(p.length, new) for p in engine.tokenize(texts)))
    for size in d.sizes(length):
        d._compile(Shape(size, length, d.chunk(length)))
    out = {}
    for name, join in (("joined", True), ("alone", False)):
        with running_server(engine, max_new_tokens=new, join_generations=join) as (_, address):
            conns = [AttentionClient(address, timeout=300) for _ in texts]
            try:
                _staggered_wave(conns, texts, kw, stagger)  # the captures' compiles
                runs = [_staggered_wave(conns, texts, kw, stagger) for _ in range(rounds)]
            finally:
                for c in conns:
                    c.close()
        out[name] = tuple(statistics.median(r[i] for r in runs) for i in (0, 1))
    return out


def _staggered_wave(conns, texts, kw, stagger: float) -> tuple[float, float]:
    """(wall ms, mean latency ms) of one wave: client k captures its text k*stagger s
    after the first."""
    latencies = [0.0] * len(texts)
    t0 = time.perf_counter()

    def one(k, client, text):
        time.sleep(max(0.0, t0 + k * stagger - time.perf_counter()))
        start = time.perf_counter()
        client.capture([text], **kw)
        latencies[k] = time.perf_counter() - start

    threads = [
        threading.Thread(target=one, args=(k, c, t))
        for k, (c, t) in enumerate(zip(conns, texts, strict=True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) * 1e3, statistics.mean(latencies) * 1e3


def _print_staggered(args, engine) -> None:
    print(f"{platform.machine()}, {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    models = {"tiny GPT-2": engine}
    if args.synthetic:
        import jaxattn
        from jaxattn.bench.synthetic import random_checkpoint

        models = {
            args.synthetic: jaxattn.load(
                random_checkpoint(args.synthetic, Path(tempfile.mkdtemp()))
            )
        }
    for model, eng in models.items():
        m = staggered(eng, args.new, args.clients, args.stagger, args.rounds)
        print(
            f"{args.clients} clients generating {args.new} tokens, {model}, client k sent "
            f"{args.stagger:g} s * k after the first: joining the run under way "
            f"{m['joined'][0]:.0f} ms in all, {m['joined'][1]:.0f} ms a client; without "
            f"{m['alone'][0]:.0f} ms in all, {m['alone'][1]:.0f} ms a client "
            f"(x{m['alone'][0] / m['joined'][0]:.2f}, x{m['alone'][1] / m['joined'][1]:.2f})"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new", type=int, default=40)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--clients", type=int, default=8, help="concurrent generating clients")
    p.add_argument("--synthetic", help="also time the concurrent clients on this synthetic preset")
    p.add_argument(
        "--stagger",
        type=float,
        help="only the staggered arrivals: client k sends k * STAGGER s after the first",
    )
    args = p.parse_args()
    from gpt2_fixture import make_gpt2_checkpoint

    import jaxattn

    engine = jaxattn.load(make_gpt2_checkpoint(tempfile.mkdtemp()), buckets=(32, 64))
    if args.stagger is not None:
        return _print_staggered(args, engine)
    kw = dict(what=["attention"], generate=args.new, stop_at_eos=False)
    engine.capture(PROMPTS, **kw)
    local = _median_ms(lambda: engine.capture(PROMPTS, **kw), args.rounds)
    turns = measure(engine, args.new, args.rounds)
    shared = {"tiny GPT-2": concurrent(engine, args.new, args.clients, args.rounds)}
    if args.synthetic:
        from jaxattn.bench.synthetic import random_checkpoint

        big = jaxattn.load(random_checkpoint(args.synthetic, Path(tempfile.mkdtemp())))
        shared[args.synthetic] = concurrent(big, args.new, args.clients, max(args.rounds // 3, 1))
    _whole_turns()
    whole = measure(engine, args.new, args.rounds)
    print(f"{platform.machine()}, {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print(f"local capture(generate={args.new}) of 3 prompts: {local:.0f} ms")
    for name, m in (("a step per turn", turns), ("the whole generation in one turn", whole)):
        print(
            f"{name}: through the server {m['served']:.0f} ms (x{m['served'] / local:.2f} "
            f"local); a plain capture alone {m['alone']:.1f} ms, during the generation "
            f"{m['during']:.1f} ms (x{m['during'] / m['alone']:.1f})"
        )
    for model, m in shared.items():
        print(
            f"{args.clients} clients generating {args.new} tokens at once, {model}: "
            f"{m['merged']:.0f} ms merged, {m['alone']:.0f} ms one run each "
            f"(x{m['alone'] / m['merged']:.2f})"
        )


if __name__ == "__main__":
    main()
