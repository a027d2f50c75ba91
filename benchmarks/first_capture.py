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

The rest is split further (issue 26's leftover), on a line of its own: each program's
first execution, timed inside the first capture as it happens without holding it up
(`FirstRuns`: its dispatch, and the wait until its outputs are ready, which takes in
any work queued before it), against the same executable run again on the same
arguments after the second capture, the device idle. The dispatches' difference is a
first execution's host-side cost (on a GPU: its kernels' modules loaded, cuBLAS/cuDNN
set up at launch). Before the first capture, in the same process, a probe of the
device's first use (`device_first_use`: a tiny matmul, bf16 matmul, convolution and
attention, compiled ahead, each run twice; --no-probe: without it, which leaves those
set-up costs to the first capture).
"""

from __future__ import annotations

import argparse
import math
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


class FirstRuns:
    """The first and second execution of every program that
    `jaxattn.engine.program_cache.Program` runs in this process, timed as they happen
    without holding the caller up (`Program.__call__` wrapped: a run's dispatch timed, and
    a thread of its own waits for its outputs); `summary` runs a program run once only
    once more on the same arguments, unless they are spent (donated to it, or later to
    another program)."""

    def __init__(self):
        from jaxattn.engine import program_cache

        self._runs: list[dict] = []  # name, compiled, args, times: [(dispatch, ready)]
        self._waiting: list[threading.Thread] = []
        self._lock = threading.Lock()
        program_cache.Program.__call__ = self._wrap(program_cache.Program.__call__)

    def _wrap(self, original):
        def call(program, *args):
            compiled = program.compiled(*args)
            rest = args[program._static :]
            with self._lock:
                run = next((r for r in self._runs if r["compiled"] is compiled), None)
                if run is None:
                    run = dict(name=program.name, compiled=compiled, args=rest, times=[])
                    self._runs.append(run)
                if len(run["times"]) == 2:
                    return compiled(*rest)
                run["times"].append(None)
                n = len(run["times"]) - 1
            return self._timed(run, n, compiled, rest)

        call.__wrapped__ = original
        return call

    def _timed(self, run: dict, n: int, compiled, args, wait: bool = False):
        """compiled(*args); into run["times"][n]: (its dispatch's seconds, the span from
        its call to its outputs ready, NaN where they were donated before they were)."""
        import jax

        t = time.perf_counter()
        out = compiled(*args)
        dispatch = time.perf_counter() - t

        def ready():  # until its outputs are ready (any work queued before it too)
            try:
                jax.block_until_ready(out)
            except Exception:  # noqa: BLE001 - donated to the next program before ready
                run["times"][n] = (dispatch, (t, math.nan))
            else:
                run["times"][n] = (dispatch, (t, time.perf_counter()))

        if wait:
            ready()
        else:
            waiting = threading.Thread(target=ready, daemon=True)
            waiting.start()
            self._waiting.append(waiting)
        return out

    def summary(self) -> str:
        """One line: the programs' first executions against their second (those with a
        second): the dispatches' seconds summed, and the wall time while at least one of
        them ran (from call to outputs ready: overlapping ones count once); each
        program's dispatch and call-to-ready seconds."""
        import jax

        from jaxattn.bench import device_trace

        for waiting in self._waiting:
            waiting.join()
        for run in self._runs:  # run once: again now, where its arguments are not spent
            if len(run["times"]) == 1 and not any(
                getattr(x, "is_deleted", lambda: False)() for x in jax.tree.leaves(run["args"])
            ):
                run["times"].append(None)
                self._timed(run, 1, run["compiled"], run["args"], wait=True)
        both = [run for run in self._runs if len(run["times"]) == 2]
        ready = [run for run in both if not any(math.isnan(b) for _, (_, b) in run["times"])]
        dispatch, wall = [], []
        for n in (0, 1):
            dispatch.append(sum(run["times"][n][0] for run in both))
            spans = device_trace.union(run["times"][n][1] for run in ready)
            wall.append(device_trace.length(spans))
        each = ", ".join(
            f"{run['name']} " + " ".join(f"{d:.3f}/{b - a:.3f}" for d, (a, b) in run["times"])
            for run in both
        )
        return (
            f"{len(both)} programs' first execution (of {len(self._runs)} run; the rest once "
            f"only, their arguments spent) dispatched in {dispatch[0]:.2f} s, the second in "
            f"{dispatch[1]:.2f} s; {len(ready)} of them (outputs not donated before ready) "
            f"running {wall[0]:.2f} s, the second {wall[1]:.2f} s "
            f"(each program's dispatch/ready s, first then second: {each})"
        )


def device_first_use() -> str:
    """One line: tiny programs of the device's first-use costs (cuBLAS, cuDNN: a matmul
    in float32 and bfloat16, a convolution, an attention) each compiled ahead (not
    timed), then run twice (dispatched and waited for) on the default device."""
    import jax
    import numpy as np

    f32, bf16 = np.float32, jax.numpy.bfloat16
    probes = {  # name: (function, its arguments' shapes, their dtype)
        "matmul": (jax.numpy.matmul, ((128, 128), (128, 128)), f32),
        "matmul bf16": (jax.numpy.matmul, ((128, 128), (128, 128)), bf16),
        "convolution": (
            lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME"),
            ((1, 8, 16, 16), (8, 8, 3, 3)),
            f32,
        ),
        "attention": (jax.nn.dot_product_attention, ((2, 64, 4, 32),) * 3, bf16),
    }
    rows = []
    for name, (function, shapes, dtype) in probes.items():
        args = jax.device_put([np.ones(shape, np.float32).astype(dtype) for shape in shapes])
        compiled = jax.jit(function).lower(*args).compile()
        took = []
        for _ in range(2):
            t = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            took.append(time.perf_counter() - t)
        rows.append(f"{name} {took[0]:.3f} then {took[1]:.4f} s")
    return f"device first use ({jax.devices()[0].device_kind}): " + ", ".join(rows)


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
    p.add_argument("--no-probe", action="store_true", help="no device first-use probe")
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
        probe = "" if args.no_probe else device_first_use()
        runs = FirstRuns()
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
        split = runs.summary()
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
    print(f"the rest, split: {split}")
    if probe:
        print(f"before the first capture, {probe}")


if __name__ == "__main__":
    main()
