"""The GPU facts `jaxattn bench` does not time (issues 12, 26), one check a command.

    python benchmarks/gpu_checks.py sanity      # the GPU is seen; a tiny capture equals the CPU's
    python benchmarks/gpu_checks.py zero-copy   # numpy views a pinned output in place?
    python benchmarks/gpu_checks.py precision   # forward/attention at highest, tf32, bf16
    python benchmarks/gpu_checks.py overlap     # outputs pinned vs staged: is the copy hidden?
    python benchmarks/gpu_checks.py profile     # a traced capture: copies beside kernels?
    python benchmarks/gpu_checks.py service     # `jaxattn serve` and a client, end to end
    python benchmarks/gpu_checks.py warmup      # Engine.warmup of one spec, timed
    python benchmarks/gpu_checks.py shape       # one shape: its compile and its speed
    python benchmarks/gpu_checks.py fast-forward  # layers nothing is captured from, vs dense

`sanity`: the versions, the device and its memory kinds, then the six quantities
of a full capture of a tiny random BERT (BERT-base's tokenizer) here and in a
child process on the CPU backend: their largest difference, relative to each
quantity's scale (the check: <= 1e-6).

`zero-copy`: a jitted step writing 1 GiB to pinned host memory (the engine's
`host_memory="pinned"` path), then `np.asarray` of it: the same address and a
time far below a host memcpy mean numpy views the buffer without a copy
(jax-ml/jax#22114). On the CPU "device" memory already is host memory: the
same check with the default memory kind.

`precision`: one random BERT-base loaded at each precision, texts of exactly
`--tokens` tokens, the forward (final hidden state) and attention timed in
interleaved rounds in one process (compile apart): each precision's speed-up
over highest and its largest attention difference from highest.

`overlap`: random BERT-base loaded at each `--precision` (comma-separated) by
host memory "pinned" (the program writes its outputs to pinned host memory)
and "staged" (device memory, then a transfer of their own): the forward,
attention, full capture and uint8 attention of texts of exactly `--tokens`
tokens, interleaved rounds in one process. The first passes run one at a time:
the captures a pass holds live in pinned host memory, and XLA's pinned pool
(64 GB by default) does not hold four full captures of 1,024 texts. Whether
staging hides the device-to-host copy behind the next batch's compute decides
`host_memory="auto"` on GPUs; staged outputs must equal pinned ones bit for bit.
The staged engines also run each capture with three batches in flight instead of
two (`BatchPipeline.depth`, `*_staged3`: the same programs, nothing compiled):
whether a fuller device queue hides more of the copy.

`profile`: random BERT-base at `--precision` (default highest) with `--host-memory`
(default here: staged) captures the attention of `-n` texts of exactly `--tokens`
tokens, as float32 and as uint8 (`PROFILED`), each twice (compile, warm), then once
under `jax.profiler.trace`; the device's
events are summed up by `jaxattn.bench.device_trace` (kernels, device-to-host copies,
how much of the copies ran beside a kernel, the device's idle time, the kernels
taking longest) and each perfetto trace kept (`--trace-out`, one file a case, for
ui.perfetto.dev).
What the `overlap` figures cannot say: where the staged capture's time goes.

`service`: `jaxattn serve` on a random BERT-base in a child process, and
`--clients` threads of one `AttentionClient` sending requests of `--request`
texts of `--tokens` tokens: attention as uint8 + zstd and as float32 without
compression, end to end (the server's compile is paid by two warm-up rounds).

`warmup`: a random-weight BERT-base (or `--model`) compiles the shapes
`Engine.warmup` plans for `--what` (default attention): every (bucket, batch
size) with `--sizes all`, one per bucket with `--sizes largest`. Run it twice
with the same ``JAXATTN_COMPILATION_CACHE`` directory for the cold and the
cached time.

`shape`: one (bucket, batch) shape of random BERT-base, the largest batch the
engine plans for `--tokens` (default 128): texts of exactly that length are
captured four times, persistent cache off, so the first compiles the program
and the best of the others is its speed. For comparing levers in fresh
processes: XLA_FLAGS, ``JAXATTN_LAYER_LOOP``, `--host-memory` (pinned against
staged: is the copy overlapped?) and `--precision`.

`fast-forward`: a 4-layer Llama-3.2-1B-shaped random model (`--tiny`: 2 layers, hidden
64), the hidden state of its last layer (so layers 0-2 capture nothing and run
`jaxattn.engine.fast_forward`'s kind: cuDNN at bf16 on a CUDA GPU, XLA's
dot_product_attention where short, blockwise where long) against attention="dense"
(every layer dense), at each `--tokens` (a list) and precision highest and bf16: the kind,
both times (first pass apart) and the largest difference relative to the dense state's
scale. The check: <= 1e-5 at highest (float32 rounding), <= 5e-2 at bf16.

`--tiny` (precision, overlap, profile, service, warmup, shape, fast-forward) swaps BERT-base for
the tiny model of `sanity`: the CPU smoke run of `benchmarks/gpu_run.sh` and the tests.
Each check prints one line a result (`--json FILE`: also its figures);
`benchmarks/gpu_run.sh` runs them on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# A tiny BERT with BERT-base's vocabulary (the benchmark tokenizer): odd sizes.
TINY = dict(
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=37,
    max_position_embeddings=160,
)
SANITY_TEXTS = ["The quick brown fox.", "A second, somewhat longer sentence about attention."]


def model_dir(out_dir: Path, tiny: bool) -> Path:
    """A random-weight BERT-base (or the tiny BERT) written into out_dir."""
    from jaxattn.bench.synthetic import random_checkpoint

    return random_checkpoint("bert-base", out_dir, **(TINY if tiny else {}))


def write_json(path: Path | None, result: dict) -> None:
    if path:
        path.write_text(json.dumps(result, indent=2) + "\n")


def tiny_capture(model: Path) -> dict:
    """The full capture of SANITY_TEXTS on the default backend: {"i/name": array}."""
    import jaxattn
    from jaxattn.bench.capture import FULL

    engine = jaxattn.load(str(model), compilation_cache_dir=False)
    captures = engine.capture(SANITY_TEXTS, what=FULL)
    return {f"{i}/{k}": v for i, c in enumerate(captures) for k, v in c.tensors.items()}


def sanity(json_path: Path | None) -> bool:
    import flax
    import jax
    import numpy as np
    import transformers

    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    result = {
        "jax": jax.__version__,
        "flax": flax.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        "platform": device.platform,
        "device_kind": getattr(device, "device_kind", ""),
        "memory_kinds": sorted(m.kind for m in device.addressable_memories()),
        "bytes_limit": stats.get("bytes_limit"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        model = model_dir(Path(tmp) / "tiny", tiny=True)
        here = tiny_capture(model)
        saved = Path(tmp) / "cpu.npz"
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        cmd = [
            sys.executable,
            __file__,
            "tiny-capture",
            "--model",
            str(model),
            "--save",
            str(saved),
        ]
        subprocess.run(cmd, env=env, check=True, timeout=120)
        with np.load(saved) as cpu:
            worst: dict[str, float] = {}
            for key, value in here.items():
                ref = cpu[key].astype(np.float64)
                scale = max(1.0, float(np.abs(ref).max()))
                diff = float(np.abs(value.astype(np.float64) - ref).max()) / scale
                name = key.split("/", 1)[1]
                worst[name] = max(worst.get(name, 0.0), diff)
    result["max_relative_difference"] = worst
    result["ok"] = ok = max(worst.values()) <= 1e-6
    print(
        f"sanity: jax {result['jax']}, flax {result['flax']}, transformers "
        f"{result['transformers']}; {result['device']} ({result['device_kind']}), memory kinds "
        f"{result['memory_kinds']}, bytes_limit {result['bytes_limit']}"
    )
    print(
        "sanity: tiny full capture here vs the CPU backend, largest difference / scale: "
        + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
        + f" -> {'ok' if ok else 'OVER 1e-6'}"
    )
    write_json(json_path, result)
    return ok


def zero_copy(nbytes: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    device = jax.devices()[0]
    kinds = {m.kind for m in device.addressable_memories()}
    kind = "pinned_host" if "pinned_host" in kinds and device.platform != "cpu" else None
    sharding = jax.sharding.SingleDeviceSharding(device, memory_kind=kind)
    fill = jax.jit(lambda s: jnp.full((nbytes // 4,), s, jnp.float32), out_shardings=sharding)
    x = jax.block_until_ready(fill(1.0))
    x = jax.block_until_ready(fill(2.0))  # compiled: the second call is the step's cost
    t = time.perf_counter()
    view = np.asarray(x)
    seconds = time.perf_counter() - t
    same = view.ctypes.data == x.addressable_data(0).unsafe_buffer_pointer()
    copy = np.empty_like(view)
    np.copyto(copy, view)  # first touch of its pages
    t = time.perf_counter()
    np.copyto(copy, view)
    memcpy = time.perf_counter() - t
    ok = bool(view[-1] == 2.0)
    print(
        f"zero-copy {device.platform} memory_kind={x.sharding.memory_kind}: np.asarray of "
        f"{nbytes / 2**30:.2f} GiB took {seconds * 1e3:.2f} ms (a host memcpy of it "
        f"{memcpy * 1e3:.1f} ms); same address: {same}; values ok: {ok}"
    )


def interleaved(runners: dict, repeats: int) -> tuple[dict, dict]:
    """First pass of each runner (compile), then `repeats` interleaved rounds:
    ({name: first pass s}, {name: best round s})."""
    first, rounds = {}, {name: [] for name in runners}
    for name, fn in runners.items():
        t = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t
    for _ in range(repeats):
        for name, fn in runners.items():
            t = time.perf_counter()
            fn()
            rounds[name].append(time.perf_counter() - t)
    return first, {name: min(times) for name, times in rounds.items()}


# Batches in flight in the overlap check's deeper runs (the engine's default: 2).
DEEPER = 3


def overlap(
    tokens: int,
    n: int,
    repeats: int,
    tiny: bool,
    json_path: Path | None,
    precisions: tuple[str, ...] = ("highest", "tf32"),
) -> None:
    import numpy as np

    import jaxattn
    from jaxattn.bench.capture import FULL, synthetic_texts

    texts = synthetic_texts(tokens, n)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(model_dir(Path(tmp), tiny))
        engines = {
            (p, m): jaxattn.load(path, precision=p, host_memory=m, buckets=(tokens,))
            for p in precisions
            for m in ("pinned", "staged")
        }
    last = engines[precisions[0], "pinned"].config.num_layers - 1
    cases = {
        "forward": dict(what="hidden_states", layers=last),
        "attention": dict(what="attention"),
        "full": dict(what=FULL),
        "uint8": dict(what="attention", dtype="uint8"),
    }

    def deeper(engine, kw):  # three batches in flight, then back to the default
        engine.pipeline.depth, depth = DEEPER, engine.pipeline.depth
        try:
            return engine.capture(texts, **kw)
        finally:
            engine.pipeline.depth = depth

    runners = {}
    for (p, m), engine in engines.items():
        for case, kw in cases.items():
            if case == "forward" and m == "staged":
                continue  # the forward's output is tiny
            runners[f"{case}_{p}_{m}"] = lambda e=engine, kw=kw: e.capture(texts, **kw)
            if m == "staged":
                runners[f"{case}_{p}_staged3"] = lambda e=engine, kw=kw: deeper(e, kw)
    t = time.perf_counter()
    _, best = interleaved(runners, repeats)  # first passes one at a time: results held
    compile_s = time.perf_counter() - t  # in pinned memory must fit XLA's pinned pool
    result = {
        "tokens": tokens,
        "n": n,
        "repeats": repeats,
        "model": "tiny" if tiny else "bert-base",
        "platform": engines[precisions[0], "pinned"].devices[0].platform,
        "all_rounds_s": compile_s,
    }
    print(f"overlap: first passes (compiles) and rounds {compile_s:.1f} s")
    for name, seconds in best.items():
        result[f"{name}_seq_per_s"] = n / seconds
        print(f"overlap {name:24s}: {n / seconds:9.1f} seq/s")
    for p in precisions:
        for case in ("attention", "full", "uint8"):
            pinned, staged = (result.get(f"{case}_{p}_{m}_seq_per_s") for m in ("pinned", "staged"))
            if pinned:
                result[f"{case}_{p}_staged_over_pinned"] = staged / pinned
                print(f"overlap {case} {p}: staged / pinned {staged / pinned:.2f}x")
            deep = result.get(f"{case}_{p}_staged3_seq_per_s")
            if deep and staged:
                result[f"{case}_{p}_depth{DEEPER}_over_2"] = deep / staged
                print(f"overlap {case} {p}: staged, {DEEPER} in flight / 2 {deep / staged:.2f}x")
    sample = texts[:4]
    for p in precisions:
        got = [engines[p, m].capture(sample, what=FULL) for m in ("pinned", "staged")]
        same = all(
            np.array_equal(a.tensors[q], b.tensors[q])
            for a, b in zip(*got, strict=True)
            for q in FULL
        )
        result[f"{p}_staged_equals_pinned"] = same
        print(f"overlap {p}: staged outputs equal pinned bit for bit: {same}")
    write_json(json_path, result)


# What `profile` traces: issue 26's (c) and (e), each short of its target on the GPU.
PROFILED = {"attention": dict(what="attention"), "uint8": dict(what="attention", dtype="uint8")}


def profile(
    tokens: int,
    n: int,
    tiny: bool,
    json_path: Path | None,
    precision: str,
    host_memory: str,
    trace_out: Path | None,
) -> None:
    import shutil

    import jax

    import jaxattn
    from jaxattn.bench import device_trace
    from jaxattn.bench.capture import synthetic_texts

    texts = synthetic_texts(tokens, n)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(model_dir(Path(tmp), tiny))
        engine = jaxattn.load(path, precision=precision, host_memory=host_memory, buckets=(tokens,))
    result = {
        "tokens": tokens,
        "n": n,
        "precision": precision,
        "host_memory": engine.step.host_memory,
        "platform": engine.devices[0].platform,
    }
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the device's events, not every Python call
    for case, kw in PROFILED.items():
        engine.capture(texts, **kw)  # compiles
        t = time.perf_counter()
        engine.capture(texts, **kw)
        plain = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as folder:
            t = time.perf_counter()
            with jax.profiler.trace(folder, create_perfetto_trace=True, profiler_options=options):
                engine.capture(texts, **kw)
            traced = time.perf_counter() - t
            summary = device_trace.summarize(device_trace.read_events(folder))
            if trace_out:  # one trace a case: trace.json.gz -> trace-uint8.json.gz
                name = trace_out.name.replace(".json.gz", f"-{case}.json.gz")
                found = next(Path(folder).glob("**/perfetto_trace.json.gz"))
                shutil.copyfile(found, trace_out.with_name(name))
        result[case] = {"seq_per_s": n / plain, "traced_seconds": traced, **summary}
        print(
            f"profile {case}: {n} texts of {tokens} tokens, {precision}, host memory "
            f"{result['host_memory']}: {n / plain:.1f} seq/s ({traced:.2f} s traced)"
        )
        for line in device_trace.describe(summary):
            print(f"profile {case} {line}")
    write_json(json_path, result)


def precision(tokens: int, n: int, repeats: int, tiny: bool, json_path: Path | None) -> None:
    import numpy as np

    import jaxattn
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.engine.precision import PRECISIONS

    texts = synthetic_texts(tokens, n)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(model_dir(Path(tmp), tiny))
        engines = {p: jaxattn.load(path, precision=p, buckets=(tokens,)) for p in PRECISIONS}
    last = engines["highest"].config.num_layers - 1
    kinds = {
        "forward": dict(what="hidden_states", layers=last),
        "attention": dict(what="attention"),
    }
    runners = {
        f"{kind}_{p}": (lambda e=e, kw=kw: e.capture(texts, **kw))
        for kind, kw in kinds.items()
        for p, e in engines.items()
    }
    first, best = interleaved(runners, repeats)
    ref = [c.tensors["attention"] for c in engines["highest"].capture(texts[:8], what="attention")]
    result = {
        "tokens": tokens,
        "n": n,
        "repeats": repeats,
        "model": "tiny" if tiny else "bert-base",
        "platform": engines["highest"].devices[0].platform,
    }
    for p, engine in engines.items():
        got = engine.capture(texts[:8], what="attention")
        diff = max(
            float(np.abs(c.tensors["attention"] - r).max()) for c, r in zip(got, ref, strict=True)
        )
        result[f"attention_{p}_max_abs_diff"] = diff
        for kind in kinds:
            name = f"{kind}_{p}"
            result[f"{name}_s"], result[f"{name}_first_pass_s"] = best[name], first[name]
            result[f"{name}_seq_per_s"] = n / best[name]
            speedup = best[f"{kind}_highest"] / best[name]
            result[f"{name}_over_highest"] = speedup
            print(
                f"precision {p:8s} {kind:9s}: {n / best[name]:9.1f} seq/s ({speedup:.2f}x "
                f"highest; first pass {first[name]:.1f} s)"
            )
        print(f"precision {p:8s} attention: largest difference from highest {diff:.1e}")
    write_json(json_path, result)


def serve_child(model: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """`jaxattn serve` on `model`, port 0, in a child process: (process, address).
    Its output is echoed, prefixed, by a thread."""
    cmd = [sys.executable, "-u", "-m", "jaxattn", "serve", "--model", model, "--port", "0", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = None
    for line in proc.stdout:
        print(f"  serve: {line.rstrip()}", flush=True)
        if "listening on" in line:
            address = line.split("listening on", 1)[1].split()[0]
            break
    if address is None:
        raise RuntimeError(f"the server exited ({proc.wait()}) before it listened")

    def echo():  # all but the one line a call
        for line in proc.stdout:
            if "jaxattn.service: Capture " not in line:
                print(f"  serve: {line.rstrip()}", flush=True)

    threading.Thread(target=echo, daemon=True).start()
    return proc, address


def service(
    tokens: int, n: int, request: int, clients: int, tiny: bool, json_path: Path | None
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.client import AttentionClient

    with tempfile.TemporaryDirectory() as tmp:
        path = str(model_dir(Path(tmp), tiny))
        proc, address = serve_child(path, ["--max-texts", str(request)])
        result = {
            "tokens": tokens,
            "request_texts": request,
            "clients": clients,
            "model": "tiny" if tiny else "bert-base",
        }
        try:
            client = AttentionClient(address, timeout=600)
            for dtype, codec, count in (("uint8", "zstd", n), ("float32", "none", n // 4)):
                batches = [synthetic_texts(tokens, request)] * max(1, count // request)

                def send(texts, dtype=dtype, codec=codec):
                    return sum(
                        len(c.tensors["attention"])
                        for c in client.capture(texts, dtype=dtype, codec=codec)
                    )

                times = []
                for _ in range(4):  # two warm-up rounds compile the batcher's shapes
                    wire0, t = client.wire_bytes, time.perf_counter()
                    with ThreadPoolExecutor(clients) as pool:
                        list(pool.map(send, batches))
                    times.append(time.perf_counter() - t)
                wire = client.wire_bytes - wire0
                seqs = len(batches) * request
                best = min(times[2:])
                key = f"{dtype}_{codec}"
                result[f"{key}_seq_per_s"] = seqs / best
                result[f"{key}_wire_bytes_per_seq"] = wire / seqs
                result[f"{key}_warmup_s"] = times[:2]
                print(
                    f"service {key:13s}: {seqs} texts of {tokens} tokens, {clients} clients x "
                    f"{request} a request: {seqs / best:8.1f} seq/s end to end, "
                    f"{wire / seqs / 1e6:.2f} MB a text on the wire, {wire / best / 1e9:.2f} "
                    f"GB/s (warm-up rounds {times[0]:.1f}, {times[1]:.1f} s)"
                )
            client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    write_json(json_path, result)


def warmup(
    what: tuple[str, ...],
    model: str | None,
    buckets: tuple[int, ...] | None,
    sizes: str,
    tiny: bool,
) -> None:
    t0 = time.perf_counter()
    import jaxattn

    options = {"buckets": buckets} if buckets else {}
    with tempfile.TemporaryDirectory() as tmp:
        engine = jaxattn.load(model or str(model_dir(Path(tmp), tiny)), **options)
        t1 = time.perf_counter()
        started = []

        def progress() -> bool:  # asked before each shape: a line each, cut off or not
            started.append(1)
            print(f"  warmup: shape {len(started)} starts at {time.perf_counter() - t1:.1f} s")
            return False

        shapes = engine.warmup(engine.make_spec(what), sizes=sizes, stop=progress)
        t2 = time.perf_counter()
    print(
        f"warmup {','.join(what)} ({sizes} sizes) on {engine.devices[0].platform}: "
        f"{shapes} shapes in {t2 - t1:.1f} s (import + load {t1 - t0:.1f} s); "
        f"{engine.budgets}"
    )


def shape(what: tuple[str, ...], tokens: int, tiny: bool, host_memory: str, precision: str) -> None:
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.engine import batching

    with tempfile.TemporaryDirectory() as tmp:
        path = str(model_dir(Path(tmp), tiny))
        engine = jaxattn.load(
            path,
            buckets=(tokens,),
            compilation_cache_dir=False,
            host_memory=host_memory,
            precision=precision,
        )
    spec = engine.make_spec(what)
    size = batching.batch_size(tokens, lambda t: engine.output_bytes(spec, t), engine.budgets)
    texts = synthetic_texts(tokens, size * len(engine.devices))
    seconds = []
    for _ in range(4):  # the first compiles the one shape
        t = time.perf_counter()
        engine.capture(texts, what=what)
        seconds.append(time.perf_counter() - t)
    best = min(seconds[1:])
    print(
        f"shape {','.join(what)} T={tokens} B={len(texts)} on {engine.devices[0].platform}, "
        f"layers {engine.step.layer_loop}, host memory {engine.step.host_memory}, {precision}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}: "
        f"first capture {seconds[0]:.1f} s (compile ~{seconds[0] - best:.1f} s, "
        f"{engine.compiled_shapes} program), then {len(texts) / best:.0f} seq/s (best of 3)"
    )


FAST_LIMITS = {"highest": 1e-5, "bf16": 5e-2}  # fast-forward: largest relative difference


def fast_forward(tokens: list[int], tiny: bool, json_path: Path | None) -> bool:
    import jax
    import numpy as np

    import jaxattn
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.bench.synthetic import random_checkpoint
    from jaxattn.engine import fast_forward as fast
    from jaxattn.engine.precision import Matmul
    from jaxattn.engine.step import matmul_platform

    small = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4)
    small |= dict(num_key_value_heads=2, head_dim=16, intermediate_size=96)
    result, ok = {"device": jax.devices()[0].device_kind}, True
    with tempfile.TemporaryDirectory() as tmp:
        shape = small if tiny else dict(num_hidden_layers=4)
        model = str(random_checkpoint("llama-1b", Path(tmp), **shape))
        for precision, length in ((p, t) for p in FAST_LIMITS for t in tokens):
            texts = synthetic_texts(length, 2)
            got, times = {}, {}
            for attention in ("dense", "auto"):
                engine = jaxattn.load(
                    model, precision=precision, attention=attention, buckets=(length,)
                )
                layer = engine.config.num_layers - 1
                for run in ("first", "second"):
                    t = time.perf_counter()
                    cap = engine.capture(texts, what="hidden_states", layers=[layer])
                    times[f"{attention}_{run}_s"] = time.perf_counter() - t
                got[attention] = np.stack([c.hidden_states for c in cap])
            mm = Matmul(precision, matmul_platform(jax.devices()[0]))
            kind = fast.choose("auto", engine.config, mm, length, False)
            diff = float(np.abs(got["auto"] - got["dense"]).max() / np.abs(got["dense"]).max())
            good = diff <= FAST_LIMITS[precision]
            ok &= good
            key = f"{precision}_{length}"
            result[key] = dict(kind=kind, max_relative_difference=diff, ok=good, **times)
            print(
                f"fast-forward {precision} T={length}: kind {kind}, max rel diff {diff:.2e} "
                f"({'ok' if good else 'OVER ' + str(FAST_LIMITS[precision])}), "
                f"dense {times['dense_second_s']:.3f} s, fast {times['auto_second_s']:.3f} s "
                f"(first passes {times['dense_first_s']:.1f} / {times['auto_first_s']:.1f} s)",
                flush=True,
            )
    result["ok"] = ok
    write_json(json_path, result)
    return ok


def main() -> int:
    checks = (
        "sanity",
        "zero-copy",
        "precision",
        "overlap",
        "profile",
        "service",
        "warmup",
        "shape",
        "tiny-capture",
        "fast-forward",
        "checkpoint",
    )
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("check", choices=checks)
    p.add_argument("--bytes", type=int, default=1 << 30, help="zero-copy: output size")
    p.add_argument("--what", default="attention", help="warmup, shape: the quantities")
    p.add_argument(
        "--tokens",
        type=lambda v: [int(t) for t in v.split(",")],
        default=[128],
        help="the synthetic texts' length (fast-forward: a list, e.g. 512,4096)",
    )
    p.add_argument("-n", type=int, default=1024, help="precision, overlap, service: texts")
    p.add_argument("--repeats", type=int, default=3, help="precision, overlap: timed rounds")
    p.add_argument("--request", type=int, default=256, help="service: texts a request")
    p.add_argument("--clients", type=int, default=4, help="service: concurrent requests")
    p.add_argument("--tiny", action="store_true", help="the tiny BERT instead of BERT-base")
    p.add_argument(
        "--host-memory", help="shape, profile: the engine's host_memory (auto; profile: staged)"
    )
    p.add_argument("--trace-out", type=Path, help="profile: keep the perfetto trace (.json.gz)")
    p.add_argument(
        "--precision", default="highest", help="shape: the compute precision (overlap: a list)"
    )
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--model", help="warmup: a checkpoint (default: random BERT-base)")
    p.add_argument("--save", type=Path, help="checkpoint: the folder to write it in")
    p.add_argument("--buckets", help="warmup: bucket lengths, e.g. 8,16 (default: the engine's)")
    p.add_argument(
        "--sizes",
        default="all",
        choices=("all", "largest"),
        help="warmup: every batch size of the ladder, or the largest per bucket",
    )
    args = p.parse_args()
    what = tuple(args.what.split(","))
    if args.check == "sanity":
        return 0 if sanity(args.json) else 1
    if args.check == "fast-forward":
        return 0 if fast_forward(args.tokens, args.tiny, args.json) else 1
    args.tokens = args.tokens[0]
    if args.check == "checkpoint":  # the random BERT-base (or tiny) for other scripts
        print(model_dir(args.save, args.tiny))
    elif args.check == "tiny-capture":
        import numpy as np

        np.savez(args.save, **tiny_capture(Path(args.model)))
    elif args.check == "zero-copy":
        zero_copy(args.bytes)
    elif args.check == "precision":
        precision(args.tokens, args.n, args.repeats, args.tiny, args.json)
    elif args.check == "overlap":
        overlap(args.tokens, args.n, args.repeats, args.tiny, args.json, args.precision.split(","))
    elif args.check == "profile":
        memory = args.host_memory or "staged"
        profile(args.tokens, args.n, args.tiny, args.json, args.precision, memory, args.trace_out)
    elif args.check == "service":
        service(args.tokens, args.n, args.request, args.clients, args.tiny, args.json)
    elif args.check == "shape":
        shape(what, args.tokens, args.tiny, args.host_memory or "auto", args.precision)
    else:
        buckets = tuple(int(b) for b in args.buckets.split(",")) if args.buckets else None
        warmup(what, args.model, buckets, args.sizes, args.tiny)
    return 0


if __name__ == "__main__":
    sys.exit(main())
