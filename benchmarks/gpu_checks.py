"""The issue-12 facts `jaxattn bench` does not time: zero-copy host outputs, warmup.

    python benchmarks/gpu_checks.py zero-copy          # numpy views a pinned output in place?
    python benchmarks/gpu_checks.py warmup             # Engine.warmup of one spec, timed
    python benchmarks/gpu_checks.py shape              # one shape: its compile and its speed

`zero-copy`: a jitted step writing 1 GiB to pinned host memory (the engine's
`host_memory="pinned"` path), then `np.asarray` of it: the same address and a
time far below a host memcpy mean numpy views the buffer without a copy
(jax-ml/jax#22114). On the CPU "device" memory already is host memory: the
same check with the default memory kind.

`warmup`: a random-weight BERT-base (or `--model`) compiles the shapes
`Engine.warmup` plans for `--what` (default attention): every (bucket, batch
size) with `--sizes all`, one per bucket with `--sizes largest`. Run it twice
with the same ``JAXATTN_COMPILATION_CACHE`` directory for the cold and the
cached time.
`shape`: one (bucket, batch) shape of random BERT-base, the largest batch the
engine plans for `--tokens` (default 128): texts of exactly that length are
captured four times, persistent cache off, so the first compiles the program
and the best of the others is its speed. For comparing compile-time levers
(XLA_FLAGS, ``JAXATTN_LAYER_LOOP``) in fresh processes.
Each prints one line a result; `benchmarks/gpu_session.sh` runs them on a GPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


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
    print(f"zero-copy {device.platform} memory_kind={x.sharding.memory_kind}: np.asarray of "
          f"{nbytes / 2**30:.2f} GiB took {seconds * 1e3:.2f} ms (a host memcpy of it "
          f"{memcpy * 1e3:.1f} ms); same address: {same}; values ok: {ok}")  # fmt: skip


def warmup(what: tuple[str, ...], model: str | None, buckets: tuple[int, ...] | None,
           sizes: str) -> None:  # fmt: skip
    t0 = time.perf_counter()
    import jaxattn
    from jaxattn.bench import random_bert_base

    options = {"buckets": buckets} if buckets else {}
    with tempfile.TemporaryDirectory() as tmp:
        engine = jaxattn.load(model or str(random_bert_base(Path(tmp))), **options)
        t1 = time.perf_counter()
        shapes = engine.warmup(engine.make_spec(what), sizes=sizes)
        t2 = time.perf_counter()
    print(f"warmup {','.join(what)} ({sizes} sizes) on {engine.devices[0].platform}: "
          f"{shapes} shapes in {t2 - t1:.1f} s (import + load {t1 - t0:.1f} s); "
          f"{engine.budgets}")  # fmt: skip


def shape(what: tuple[str, ...], tokens: int) -> None:
    import os

    import jaxattn
    from jaxattn.bench import random_bert_base
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.engine import batching

    with tempfile.TemporaryDirectory() as tmp:
        path = str(random_bert_base(Path(tmp)))
        engine = jaxattn.load(path, buckets=(tokens,), compilation_cache_dir=False)
    spec = engine.make_spec(what)
    size = batching.batch_size(tokens, lambda t: engine.output_bytes(spec, t), engine.budgets)
    texts = synthetic_texts(tokens, size * len(engine.devices))
    seconds = []
    for _ in range(4):  # the first compiles the one shape
        t = time.perf_counter()
        engine.capture(texts, what=what)
        seconds.append(time.perf_counter() - t)
    best = min(seconds[1:])
    print(f"shape {','.join(what)} T={tokens} B={len(texts)} on {engine.devices[0].platform}, "
          f"layers {engine.step.layer_loop}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}: "
          f"first capture {seconds[0]:.1f} s (compile ~{seconds[0] - best:.1f} s, "
          f"{engine.compiled_shapes} program), then {len(texts) / best:.0f} seq/s "
          f"(best of 3)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("check", choices=("zero-copy", "warmup", "shape"))
    p.add_argument("--bytes", type=int, default=1 << 30, help="zero-copy: output size")
    p.add_argument("--what", default="attention", help="warmup, shape: the quantities")
    p.add_argument("--tokens", type=int, default=128, help="shape: the text length")
    p.add_argument("--model", help="warmup: a checkpoint (default: random BERT-base)")
    p.add_argument("--buckets", help="warmup: bucket lengths, e.g. 8,16 (default: the engine's)")
    p.add_argument(
        "--sizes",
        default="all",
        choices=("all", "largest"),
        help="warmup: every batch size of the ladder, or the largest per bucket",
    )
    args = p.parse_args()
    if args.check == "zero-copy":
        zero_copy(args.bytes)
    elif args.check == "shape":
        shape(tuple(args.what.split(",")), args.tokens)
    else:
        buckets = tuple(int(b) for b in args.buckets.split(",")) if args.buckets else None
        warmup(tuple(args.what.split(",")), args.model, buckets, args.sizes)


if __name__ == "__main__":
    main()
