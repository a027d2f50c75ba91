"""Generation through the service (issue 30): its cost against the local engine, and how
long a plain capture waits behind a long generation.

    .venv/bin/python benchmarks/service_generate.py [--new N] [--rounds R]

The tiny random GPT-2 of the tests (64 positions), three prompts continued by N
tokens (EOS ignored) then captured (attention): the local `Engine.capture(generate=N)`
and a client's `capture(..., generate=N)` through an in-process server, the median
of R calls each after a compiling one. Then, R times, a one-text plain capture sent
while another thread's generation runs: its latency, next to the same capture alone.
The server runs a generation a step per batcher turn; the same figures with the
whole generation in one turn (the worker's step patched to loop, in this process
only) show what the turns buy.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new", type=int, default=40)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    from gpt2_fixture import make_gpt2_checkpoint

    import jaxattn

    engine = jaxattn.load(make_gpt2_checkpoint(tempfile.mkdtemp()), buckets=(32, 64))
    kw = dict(what=["attention"], generate=args.new, stop_at_eos=False)
    engine.capture(PROMPTS, **kw)
    local = _median_ms(lambda: engine.capture(PROMPTS, **kw), args.rounds)
    turns = measure(engine, args.new, args.rounds)
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


if __name__ == "__main__":
    main()
