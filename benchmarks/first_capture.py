"""Time to the first result in a new process: load + first capture (issue 12).

    JAXATTN_COMPILATION_CACHE=$(mktemp -d) python benchmarks/first_capture.py   # cold
    (again with the same directory)                                               # cached

Captures the first N EWT dev sentences (default 100) with the full quantity set
on the embedded model, a checkpoint (--model DIR: `gpu_checks.py checkpoint --save DIR`
writes a random BERT-base once for a cold and a cached run) or a random BERT-base made
here (--random-bert-base, on a GPU; its making is timed apart), and prints the import
and load time, the first capture, a second capture and the shapes compiled.

A cached run loads each program's exported form from the program cache
(`jaxattn.engine.program_cache`, skipping the model's tracing) and its compile from
XLA's persistent cache; $JAXATTN_PROGRAM_CACHE=off measures without the former.

The first capture is split in two: the wall time inside JAX's tracing, lowering and
XLA compile-or-cache-load (`jax.monitoring`'s time spans of those events, their union:
the engine compiles several shapes at once in threads) and the rest (the capture's run,
its first batches' host work). The engine exposes no compile timings of its own
(`Engine.compiled_shapes` is a count); the second capture, beside, is the run alone.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from gpu_checks import TINY

# jax.monitoring's events of getting a program: trace, lower, compile (or load from the
# persistent cache: XLA's compile event wraps both).
PROGRAM_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"


class ProgramSpans:
    """The time spans of PROGRAM_EVENTS and the persistent-cache loads, recorded by
    jax.monitoring listeners from any thread."""

    def __init__(self):
        import jax.monitoring

        self.spans: list[tuple[str, float, float]] = []
        self.compiles = self.cache_loads = 0
        self._lock = threading.Lock()
        jax.monitoring.register_event_time_span_listener(self._span)
        jax.monitoring.register_event_duration_secs_listener(self._duration)

    def _span(self, event: str, start: float, end: float, **_) -> None:
        if event in PROGRAM_EVENTS:
            with self._lock:
                self.spans.append((event, start, end))
                self.compiles += event == PROGRAM_EVENTS[-1]

    def _duration(self, event: str, seconds: float, **_) -> None:
        if event == CACHE_HIT_EVENT:
            with self._lock:
                self.cache_loads += 1

    def wall(self, since: float, events: tuple[str, ...] = PROGRAM_EVENTS) -> float:
        """Seconds (time.time) after `since` covered by at least one span of `events`:
        overlapping spans (threads compiling at once, a trace inside a compile) count once."""
        from jaxattn.bench import device_trace

        with self._lock:
            spans = [(max(a, since), b) for e, a, b in self.spans if e in events]
        return device_trace.length(device_trace.union(spans))


def main() -> None:
    t0 = time.perf_counter()
    import jaxattn
    from jaxattn.bench import read_sentences
    from jaxattn.bench.capture import FULL
    from jaxattn.bench.sentences import DEFAULT_CONLLU
    from jaxattn.bench.synthetic import random_checkpoint

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--conllu", type=Path, default=DEFAULT_CONLLU)
    p.add_argument(
        "--model", type=Path, help="a checkpoint directory (default: the embedded model)"
    )
    p.add_argument("--random-bert-base", action="store_true", help="BERT-base, random weights")
    p.add_argument("--tiny", action="store_true", help="with --random-bert-base: a tiny BERT")
    p.add_argument("--what", default=",".join(FULL))
    args = p.parse_args()
    if args.model and args.random_bert_base:
        p.error("--model or --random-bert-base, not both")
    if args.model and not args.model.is_dir():
        p.error(f"--model {args.model}: no such directory")
    texts = read_sentences(args.conllu, args.n)
    spans = ProgramSpans()
    with tempfile.TemporaryDirectory() as tmp:
        model, made = str(args.model) if args.model else None, 0.0
        if args.random_bert_base:  # not part of the figure: a real model is on disk
            t = time.perf_counter()
            model = str(random_checkpoint("bert-base", Path(tmp), **(TINY if args.tiny else {})))
            made = time.perf_counter() - t
        engine = jaxattn.load(model)
        t1, since, compiles, loads = (
            time.perf_counter(),
            time.time(),
            spans.compiles,
            spans.cache_loads,
        )
        what = tuple(args.what.split(","))
        engine.capture(texts, what=what, too_long="truncate")
        t2 = time.perf_counter()
        programs = spans.wall(since)
        # each kind's own wall time: the persistent cache saves XLA's compile, not
        # tracing or lowering, which hold the interpreter's lock (one thread at a time)
        kinds = [spans.wall(since, (event,)) for event in PROGRAM_EVENTS]
        compiles, loads = spans.compiles - compiles, spans.cache_loads - loads
        engine.capture(texts, what=what, too_long="truncate")
        t3 = time.perf_counter()
    cache = engine.step.program_cache  # None: off (jaxattn.engine.program_cache)
    kept = "the program cache off" if cache is None else f"{cache.loaded} from the program cache"
    made_note = f" (besides making the random checkpoint, {made:.1f} s)" if made else ""
    print(
        f"{len(texts)} texts, {engine.info.name}: import + load {t1 - t0 - made:.1f} s{made_note}, "
        f"first capture {t2 - t1:.1f} s = programs {programs:.1f} s ({compiles} XLA programs, "
        f"{loads} loaded from the persistent cache, {kept}; "
        f"tracing {kinds[0]:.1f} s, lowering "
        f"{kinds[1]:.1f} s, compiling or loading {kinds[2]:.1f} s) + the rest "
        f"{t2 - t1 - programs:.1f} s; "
        f"second {t3 - t2:.1f} s (the run alone), {engine.compiled_shapes} shapes compiled"
    )


if __name__ == "__main__":
    main()
