"""The server's send path in process, gRPC left out: the servicer's `Capture` generator
drained by a fake context, BERT-base-shaped uint8 attention + zstd (codecs stubbed).

    .venv/bin/python benchmarks/send_drain.py [--texts N] [--repeats R] [--profile FILE]
        [--send-ms MS] [--real-codecs]

The engine, request and codec stubs are `client_gil_e2e.py --bookkeeping`'s (a tiny
random BERT of BERT-base's 12 x 12 heads at 128 tokens replaying near-uniform uint8
rows; each piece's "compression" a fixed frame of 37 % of its bytes): what is left is
the server's own Python per message (batcher, job flow control, framing, the codec
pool's hand-offs, metrics), all of which holds the interpreter lock. Reported (each the
least of R): decoded GB/s, the process's CPU s per decoded GB (the handler's thread, the
encode thread, the codec pool's and the batcher's together) and the handler thread's
alone (with `--inline`, the encode thread's work too), messages a GB, and the time the
cyclic garbage collector took (`gc.callbacks`); `--profile`
writes a cProfile (by own time) of one more drain, the encode thread's work done in
the handler's thread (as `--inline`: the codec pool's threads are not profiled);
`--send-ms` has the drain wait that long after each message, the interpreter lock let go
(as gRPC's handler thread waits for each send): the sends the slower side, the encode
thread ahead, waiting on a full queue (`service.prefetch`); `--real-codecs` compresses
with zstd itself (the codec pool's threads at work on each piece).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))


class FakeContext:
    """Just enough of a grpc.ServicerContext for `AttentionServicer.Capture` run to its end."""

    def add_callback(self, callback) -> bool:
        return True

    def cancel(self) -> None:
        raise RuntimeError("the drain was cancelled")

    def time_remaining(self):
        return None

    def is_active(self) -> bool:
        return True

    def peer(self) -> str:
        return "drain"

    def invocation_metadata(self):
        return ()

    def send_initial_metadata(self, metadata) -> None:
        pass

    def set_trailing_metadata(self, metadata) -> None:
        pass

    def abort(self, code, details):
        raise RuntimeError(f"{code}: {details}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=48)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", help="write a cProfile of one more drain here")
    p.add_argument(
        "--inline",
        action="store_true",
        help="no encode thread: the handler's thread encodes (its CPU s a GB reported too)",
    )
    p.add_argument(
        "--send-ms",
        type=float,
        default=0.0,
        help="wait this long after each message, as for a send (the lock let go)",
    )
    p.add_argument("--real-codecs", action="store_true", help="zstd itself, not the stubs")
    args = p.parse_args(argv)

    from client_gil import _no_codecs
    from client_gil_e2e import checkpoint_in, synthetic_engine, texts_of

    from jaxattn.client.request import build
    from jaxattn.wire.protowire import headers_in
    from service import servicer as servicer_module
    from service.metrics import ServerMetrics
    from service.server import ServerOptions, components

    if not args.real_codecs:
        _no_codecs()
    if args.inline or args.profile:
        # The encode thread's work done in the handler's: one thread does all of the send
        # path's Python but the codec pool's (the stubbed compression, the CRC-32).
        servicer_module.prefetch = lambda messages: messages
    with tempfile.TemporaryDirectory() as tmp:
        engine = synthetic_engine(str(checkpoint_in(tmp)))
    # As `create_server` builds them, with its defaults but these two (client_gil_e2e's)
    options = ServerOptions(max_tokens=1 << 20, queue_size=128)
    batcher, parser = components(engine, options)
    metrics = ServerMetrics(engine, batcher, max_batch_examples=options.max_batch_examples)
    servicer = servicer_module.AttentionServicer(engine, batcher, parser, 8, metrics=metrics)
    batcher.start()
    request = build(
        texts_of(args.texts),
        "attention",
        [],
        [],
        "uint8",
        "zstd",
        too_long="error",
        precision=None,
        max_chunk_bytes=None,
    )
    request.coalesce = request.weights_in_header = True  # as `AttentionClient` asks

    def drain() -> tuple[int, int, int]:
        size = messages = headers = 0
        for message in servicer.Capture(request, FakeContext()):
            size += len(message)
            messages += 1
            if args.send_ms:
                time.sleep(args.send_ms / 1e3)
            headers += headers_in(message)
        if headers != args.texts:
            raise RuntimeError(f"{headers} headers for {args.texts} texts")
        return size, messages, headers

    drain()  # computed, then replayed
    gc_s, gc_runs, gc_at = [0.0], [0, 0, 0], [0.0]

    def gc_timed(phase: str, info: dict) -> None:  # the cyclic collector's own time
        if phase == "start":
            gc_at[0] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_at[0]
            gc_runs[info["generation"]] += 1

    gc.callbacks.append(gc_timed)
    decoded = args.texts * 12 * 12 * 128 * 128 / 1e9
    best = None
    for _ in range(args.repeats):
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        size, messages, _ = drain()
        got = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - h0
        best = [min(b, g) for b, g in zip(best, got, strict=True)] if best else got
    wall, cpu, handler = best
    gc.callbacks.remove(gc_timed)
    drains = args.repeats * decoded
    print(
        f"{args.texts} texts, {decoded:.3f} GB decoded, {size / 1e6:.1f} MB sent in "
        f"{messages} messages: {decoded / wall:.2f} GB/s, {cpu / decoded:.3f} CPU s a GB, "
        f"the handler's thread {handler / decoded:.3f} (each the least of {args.repeats}), "
        f"{messages / decoded:.0f} messages a GB; the cyclic GC {gc_s[0] / drains:.3f} s a GB "
        f"(collections of generations 0, 1, 2 a GB: "
        f"{', '.join(f'{n / drains:.0f}' for n in gc_runs)}); load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        drain()
        prof.disable()
        with open(args.profile, "w") as f:
            print(f"{decoded:.3f} GB decoded, {messages} messages", file=f)
            pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(45)
    batcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
