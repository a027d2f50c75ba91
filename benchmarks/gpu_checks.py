"""The GPU facts `jaxattn bench` does not time (issues 12, 26), one check a command.

    python benchmarks/gpu_checks.py sanity      # the GPU is seen; a tiny capture equals the CPU's
    python benchmarks/gpu_checks.py sanity-families  # every family, blockwise, generate, dtypes
    python benchmarks/gpu_checks.py zero-copy   # numpy views a pinned output in place?
    python benchmarks/gpu_checks.py precision   # forward/attention at highest, tf32, bf16
    python benchmarks/gpu_checks.py overlap     # outputs pinned vs staged: is the copy hidden?
    python benchmarks/gpu_checks.py profile     # a traced capture: copies beside kernels?
    python benchmarks/gpu_checks.py service     # `jaxattn serve` and a client, end to end
    python benchmarks/gpu_checks.py warmup      # Engine.warmup of one spec, timed
    python benchmarks/gpu_checks.py shape       # one shape: its compile and its speed
    python benchmarks/gpu_checks.py fast-forward  # layers nothing is captured from, vs dense
    python benchmarks/gpu_checks.py checkpoint  # a random checkpoint (--synthetic PRESET)
    python benchmarks/gpu_checks.py split       # a decoder's full capture taken apart

`sanity`: the versions, the device and its memory kinds, then the six quantities
of a full capture of a tiny random BERT (BERT-base's tokenizer) here and in a
child process on the CPU backend: their largest difference, relative to each
quantity's scale (the check: <= 1e-6).

`sanity-families`: every family of `jaxattn.config.FAMILIES` (the one list; a family
without a tiny checkpoint in `jaxattn.bench.synthetic.TINY_FAMILIES` fails, named), the
decoders first: its tiny random checkpoint's full capture (every quantity the family
allows, `ModelConfig.quantities`) of three texts of 24, 15 and 8 tokens, padded to 24,
at precision highest on this device and on the CPU backend, in one process (an engine
a backend, `jax.devices("cpu")`; the families `FAMILY_THREADS` at a time); per family
the largest difference relative to each quantity's scale (the check: <= FAMILY_LIMIT,
1e-5; why: at FAMILY_LIMIT). Beside llama's (grouped-query heads): the blockwise path in
8-token blocks against the dense capture on this device (attention, decoder_head_stats)
and `Engine.generate` of 4 tokens, the same ids on both backends; beside bert's: uint8
codes at most one step apart, bfloat16 within one bfloat16 step, and a head ablation (one
head zeroed, one uniform) equal on both backends and moving the hidden states. A line a
family (and a check), then the families that failed; non-zero exit if any did. On the
CPU alone (the smoke run) each capture is compared with itself, which it says first.

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

`service`: `jaxattn serve` on a random BERT-base (or `--model`) in a child process,
and `--clients` clients sending requests of `--request` texts of `--tokens` tokens:
attention as uint8 + zstd (`-n` texts a round) and as float32 without compression
(half as many, at least a request a client), end to end. Per codec a warm-up round
each way (the server compiles), then two rounds with the clients as threads sharing one
`AttentionClient` in this process (comparable with the earlier figures) and two with
each client a process of its own (no shared GIL); then a server whose codec pool has
`CODEC_THREADS` threads (`JAXATTN_CODEC_THREADS`; the default is a thread a core, at
most 8) for one uint8 + zstd round each way: is the pool's size the ceiling? A line
per way, its best round: seq/s, the wire, and the CPU seconds of the server process
and of the clients (/proc/<pid>/stat, all threads: 1.0 core of the one client process
means its GIL is the ceiling), in the round and per decoded GB, and the server's codec
threads' share (as many cores as the pool has threads: the pool is the ceiling); last,
the processes / threads and the larger pool / default ratios. `--json` (every round's
figures too) is written after each line.

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

`checkpoint`: writes the random BERT-base (or `--synthetic PRESET`, a
`jaxattn.bench.synthetic` preset) into `--save`, for the steps after it (with `--tiny`:
the tiny BERT, or the preset's family's tiny model).

`split` (issue 30: Llama-1B's full capture ran 17x its attention capture on an H200,
3 GB/s to the host against 25): on `--model` (a `checkpoint`), `-n` texts of exactly
`--tokens` tokens as the model's own tokenizer counts them, `Engine.capture` of the
full capture (d) and then of each of its quantities alone, each first pass (compile)
apart and the best of `--repeats`: seconds, bytes, GB/s, and how the engine ran and held
the call: its batch sizes or its layer groups (an example past the example budget,
`batching.Budgets.group_bytes`, runs in groups and is assembled on the host), the bytes
it kept as views of pinned memory and those it copied out (`host.HeldResults`: past
`pinned_budget`), the bytes assembled from groups; after (d), one (d) call traced, its
device timeline summed up as `profile`'s; last, (d) as it ran before issue 30's fix
(`full_grouped_before`: an example in layer groups past the 4 GiB batch budget). A
case not started within `--seconds` is skipped, named. `--host-memory` sets the
engine's (default auto: staged on a GPU): with "pinned" the programs write their outputs
to pinned host memory themselves, so the timeline shows whether those copies run beside
the next example's kernels (staged, on the H200 in 2026-11-28's fifth session: 1 % of
them did). Prints only (`--json` where given).

`--tiny` (precision, overlap, profile, service, warmup, shape, fast-forward, checkpoint) swaps
BERT-base for the tiny model of `sanity`: the CPU smoke run of `benchmarks/gpu_run.sh` and
the tests.
Each check prints one line a result (`--json FILE`: also its figures);
`benchmarks/gpu_run.sh` runs them on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
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
GB = 1e9  # split's figures, as `jaxattn bench` prints them


def model_dir(out_dir: Path, tiny: bool, preset: str = "bert-base") -> Path:
    """A random-weight BERT-base (or the tiny BERT) written into out_dir; another
    `jaxattn.bench.synthetic` preset where named (tiny: its family's tiny model,
    `TINY_FAMILIES`)."""
    from jaxattn.bench.synthetic import TINY_FAMILIES, random_checkpoint, tiny_checkpoint

    if preset == "bert-base" or not tiny:
        return random_checkpoint(preset, out_dir, **(TINY if tiny else {}))
    family = next((f for f, (shape, _) in TINY_FAMILIES.items() if shape == preset), None)
    if family is None:
        raise SystemExit(f"no tiny model of the preset {preset!r} in TINY_FAMILIES")
    return tiny_checkpoint(family, out_dir)


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


def relative_difference(value, ref) -> float:
    """The largest |value - ref| over ref's scale (its largest finite magnitude, at least 1);
    equal infinities (a decoder's future scores) and NaNs at the same places are equal,
    one side's alone inf."""
    import numpy as np

    a, b = np.asarray(value, np.float64), np.asarray(ref, np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0
    finite = np.abs(b[np.isfinite(b)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    with np.errstate(invalid="ignore"):  # a - b of equal infinities too: masked by `same`
        diff = np.where(same, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=np.inf, posinf=np.inf).max()) / scale


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
                diff = relative_difference(value, cpu[key])
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


# sanity-families: the largest difference / scale of a quantity between the GPU and the
# CPU backend at precision highest. Both compute in float32, in other orders (their
# reductions, fusions, the GPU's scanned layers against the CPU's unrolled ones): the
# tiny BERT of `sanity` differs by at most 1.2e-7 (keys; H200, 2026-11-26 and -27), about
# float32's epsilon. The quantities here go further through the model (norms, ratios,
# statistics, soft caps): 1e-5, about 80 epsilons, passes rounding and fails a wrong
# mask, window, position or head (differences of 1e-3 and more).
FAMILY_LIMIT = 1e-5
# Blockwise against dense: the same float32 sums in blocks (an online softmax): the same limit.
BLOCK = 8  # sanity-families: the blockwise path's block, three blocks of the 24 tokens
BF16_LIMIT = 2.0**-7  # two bfloat16 roundings of nearly equal values: one step apart
# The padded length of sanity-families and its texts' exact lengths in tokens, as each
# family's own tokenizer counts them (Qwen2's reads the words letter by letter).
FAMILY_TOKENS = 24
FAMILY_LENGTHS = (24, 15, 8)
# Families checked at once, each in a thread of its own: most of the check is compiling,
# which XLA does outside the GIL (two programs a family, its backends').
FAMILY_THREADS = min(8, os.cpu_count() or 1)
# The heads sanity-families ablates on its encoder: (layer, head) zeroed and made uniform.
ABLATED = {"zero": {(0, 1)}, "uniform": {(1, 0)}}
# Checked beyond the full capture (the families' order: the decoders first, never run
# on a GPU before; this list's family at its place): one decoder (GQA) and one encoder.
DECODER_EXTRAS, ENCODER_EXTRAS = "llama", "bert"


def family_texts(engine) -> list[str]:
    """One text of each of FAMILY_LENGTHS tokens, as the engine's own tokenizer counts
    them (`jaxattn.bench.capture.fitted_texts`)."""
    from jaxattn.bench.capture import fitted_texts

    return [fitted_texts(engine, length, 1)[0] for length in FAMILY_LENGTHS]


def family_order() -> list[str]:
    """Every family of `jaxattn.config.FAMILIES` (the one list), the decoders first."""
    from jaxattn.checkpoints.families import FAMILIES as TABLES
    from jaxattn.config import FAMILIES

    return sorted(FAMILIES, key=lambda f: not (f in TABLES and TABLES[f].fixed.get("causal")))


def differences(got: list, ref: list, names) -> dict[str, float]:
    """Per quantity, the largest relative_difference over the texts' captures."""
    return {
        q: max(
            relative_difference(a.tensors[q], b.tensors[q]) for a, b in zip(got, ref, strict=True)
        )
        for q in names
    }


def worst_of(diffs: dict[str, float]) -> tuple[str, float]:
    name = max(diffs, key=diffs.get)
    return name, diffs[name]


def decoder_extras(path: Path, here, engines, texts: list[str], dense: list) -> dict:
    """Blockwise against dense on `here` (BLOCK-token blocks: attention and
    decoder_head_stats), and greedy generation's token ids on both backends."""
    import jaxattn

    blocked = jaxattn.load(
        str(path),
        buckets=(FAMILY_TOKENS,),
        devices=[here],
        attention="blockwise",
        attention_block=BLOCK,
        layer_loop="unrolled",
    )
    what = ("attention", "decoder_head_stats")
    block = blocked.step.block_for(blocked.make_spec(what), FAMILY_TOKENS)
    got = differences(blocked.capture(texts, what=what), dense, what)
    name, diff = worst_of(got)
    checks = {
        "blockwise": dict(
            ok=block == BLOCK and diff <= FAMILY_LIMIT,
            block=block,
            max_relative_difference=got,
            line=f"{block}-token blocks vs dense on {here.platform}: worst {diff:.1e} ({name})",
        )
    }
    ids = [[g.ids for g in e.generate(texts[1:], 4, stop_at_eos=False)] for e in engines]
    same = ids[0] == ids[-1]
    checks["generate"] = dict(
        ok=same,
        ids=ids,
        line=f"4 tokens x {len(texts) - 1} prompts: ids "
        + ("identical" if same else f"DIFFER {ids[0]} vs {ids[-1]}"),
    )
    return checks


def encoder_extras(path: Path, here, engines, texts: list[str], full: list) -> dict:
    """uint8 and bfloat16 outputs, and head ablation, on both backends."""
    from jaxattn.engine import HeadAblation

    what = ("attention", "alpha_fx_norm", "hidden_states")
    checks = {}
    uint8 = [e.capture(texts, what=what, dtype="uint8") for e in engines]
    step = max(
        int(abs(a.tensors[q].astype(int) - b.tensors[q].astype(int)).max())
        for a, b in zip(uint8[0], uint8[-1], strict=True)
        for q in what
    )
    checks["uint8"] = dict(
        ok=step <= 1, max_code_difference=step, line=f"codes differ by at most {step} (limit 1)"
    )
    bf16 = [e.capture(texts, what=what, dtype="bfloat16") for e in engines]
    name, diff = worst_of(differences(bf16[0], bf16[-1], what))
    checks["bfloat16"] = dict(
        ok=diff <= BF16_LIMIT,
        max_relative_difference=diff,
        line=f"worst {diff:.1e} ({name}; limit {BF16_LIMIT:.1e})",
    )
    ablation = HeadAblation(**{k: frozenset(v) for k, v in ABLATED.items()})
    ablated = [e.capture(texts, what=what, ablation=ablation) for e in engines]
    name, diff = worst_of(differences(ablated[0], ablated[-1], what))
    # An ablation that changed nothing would compare equal too: the last layer moved.
    moved = relative_difference(ablated[0][-1].hidden_states, full[-1].hidden_states)
    checks["ablation"] = dict(
        ok=diff <= FAMILY_LIMIT and moved > 1e-3,
        max_relative_difference=diff,
        moved=moved,
        line=f"{ABLATED}: worst {diff:.1e} ({name}); the hidden states moved "
        f"{moved:.1e} from the unablated",
    )
    return checks


def family_check(family: str, path: Path, here, cpu) -> dict:
    """One family's tiny checkpoint at `path`: its full capture (every quantity it allows)
    on `here` and on `cpu` (the same engine when `here` is the CPU), and its extras."""
    import jaxattn

    t = time.perf_counter()
    engines = [
        jaxattn.load(str(path), buckets=(FAMILY_TOKENS,), devices=[d])
        for d in dict.fromkeys((here, cpu))  # one engine where both are the CPU
    ]
    config = engines[0].config
    if config.family != family:
        raise AssertionError(f"its tiny checkpoint loads as family {config.family!r}")
    texts = family_texts(engines[0])
    what = config.quantities()
    captures = [e.capture(texts, what=what) for e in engines]
    diffs = differences(captures[0], captures[-1], what)
    name, diff = worst_of(diffs)
    row = dict(
        ok=diff <= FAMILY_LIMIT,
        quantities=len(what),
        lengths=[len(c.tokens) for c in captures[0]],
        max_relative_difference=diffs,
    )
    extras = {DECODER_EXTRAS: decoder_extras, ENCODER_EXTRAS: encoder_extras}.get(family)
    if extras:
        row["checks"] = extras(path, here, engines, texts, captures[0])
        row["ok"] &= all(c["ok"] for c in row["checks"].values())
    row["seconds"] = time.perf_counter() - t
    row["line"] = f"worst {diff:.1e} ({name}; limit {FAMILY_LIMIT:.0e}) of {len(what)} quantities"
    return row


def sanity_families(json_path: Path | None) -> bool:
    """The `sanity-families` check (module doc)."""
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from jaxattn.bench.synthetic import tiny_checkpoint

    here, cpu = jax.devices()[0], jax.devices("cpu")[0]
    families = family_order()
    result = dict(
        device=str(here),
        device_kind=getattr(here, "device_kind", ""),
        compared_with="cpu backend" if here != cpu else "itself (one backend)",
        limit=FAMILY_LIMIT,
        families={},
    )
    if here == cpu:
        print(
            "sanity-families: one backend (cpu): each family's capture is compared with "
            "itself (the code path only; on a GPU it is compared with the CPU backend's)",
            flush=True,
        )

    def failure(e: Exception) -> dict:  # the family named, the rest go on
        return dict(ok=False, line=f"{type(e).__name__}: {e}".splitlines()[0])

    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(FAMILY_THREADS) as pool:
        jobs = {}
        for family in families:  # written one at a time (torch's seed is global)
            try:
                path = tiny_checkpoint(family, Path(tmp) / family)
            except Exception as e:
                jobs[family] = failure(e)
            else:
                jobs[family] = pool.submit(family_check, family, path, here, cpu)
        for family, job in jobs.items():  # in order, each as soon as it is done
            try:
                row = job if isinstance(job, dict) else job.result()
            except Exception as e:
                row = failure(e)
            result["families"][family] = row
            verdict = "ok" if row["ok"] else "FAILED"
            seconds = f" in {row['seconds']:.1f} s" if "seconds" in row else ""
            print(
                f"sanity-families {family:10s}: {verdict}: {here.platform} vs "
                f"{'cpu' if here != cpu else 'itself'}, {row['line']}{seconds}",
                flush=True,
            )
            for name, check in row.get("checks", {}).items():
                mark = "ok" if check["ok"] else "FAILED"
                print(f"sanity-families {family:10s}: {name} {mark}: {check['line']}", flush=True)
            write_json(json_path, result)  # a step cut off keeps the families it checked
    failed = [f for f, row in result["families"].items() if not row["ok"]]
    result["failed"], result["ok"] = failed, not failed
    result["seconds"] = seconds = time.perf_counter() - t
    print(
        f"sanity-families: {len(families) - len(failed)} of {len(families)} families ok "
        f"in {seconds:.1f} s ({FAMILY_THREADS} at a time)"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    write_json(json_path, result)
    return not failed


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
    for case, kw in PROFILED.items():
        engine.capture(texts, **kw)  # compiles
        t = time.perf_counter()
        engine.capture(texts, **kw)
        plain = time.perf_counter() - t
        # one trace a case: trace.json.gz -> trace-uint8.json.gz
        keep = trace_out and trace_out.with_name(
            trace_out.name.replace(".json.gz", f"-{case}.json.gz")
        )
        traced, summary = traced_call(lambda kw=kw: engine.capture(texts, **kw), keep)
        result[case] = {"seq_per_s": n / plain, "traced_seconds": traced, **summary}
        print(
            f"profile {case}: {n} texts of {tokens} tokens, {precision}, host memory "
            f"{result['host_memory']}: {n / plain:.1f} seq/s ({traced:.2f} s traced)"
        )
        for line in device_trace.describe(summary):
            print(f"profile {case} {line}")
    write_json(json_path, result)


def traced_call(fn, trace_out: Path | None = None) -> tuple[float, dict]:
    """(seconds, `device_trace.summarize` of the device's events) of one call of `fn`
    under `jax.profiler.trace` (`trace_out`: keep its perfetto trace there)."""
    import shutil

    import jax

    from jaxattn.bench import device_trace

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the device's events, not every Python call
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        with jax.profiler.trace(folder, create_perfetto_trace=True, profiler_options=options):
            fn()
        seconds = time.perf_counter() - t
        summary = device_trace.summarize(device_trace.read_events(folder))
        if trace_out:
            found = next(Path(folder).glob("**/perfetto_trace.json.gz"))
            shutil.copyfile(found, trace_out)
    return seconds, summary


def split(
    model: str,
    tokens: int,
    n: int,
    repeats: int,
    precision: str,
    seconds: float,
    json_path,
    host_memory: str | None = None,
) -> None:
    """The `split` check (module doc): (d) and each of its quantities alone, how each
    call planned and held its results, then one (d) call's device timeline."""
    import jaxattn
    from jaxattn.bench import device_trace
    from jaxattn.bench.capture import FULL, fitted_texts

    start = time.perf_counter()
    engine = jaxattn.load(model, precision=precision, host_memory=host_memory or "auto")
    texts = fitted_texts(engine, tokens, n)
    kept = engine.tokenize(texts)
    pipe = engine.pipeline
    held = []  # each call's HeldResults (`BatchPipeline.holding`), in order
    holding = pipe.holding
    pipe.holding = lambda *args: held.append(holding(*args)) or held[-1]
    budgets = pipe.budgets
    result = {
        "model": engine.info.name,
        "tokens": tokens,
        "n": n,
        "precision": precision,
        "platform": engine.devices[0].platform,
        "host_memory": engine.step.host_memory,
        "layer_loop": engine.step.layer_loop,
        "output_budget": budgets.output_bytes,
        "example_budget": budgets.group_bytes,
        "pinned_budget": pipe.pinned_budget,
    }
    print(
        f"split: {engine.info.name}, {n} texts of {tokens} tokens, {precision}, on "
        f"{result['platform']}, host memory {result['host_memory']}, layers "
        f"{result['layer_loop']}; loaded in {time.perf_counter() - start:.1f} s; output "
        f"budget {budgets.output_bytes / GB:.2f} GB a batch, an example in layer groups "
        f"past {budgets.group_bytes / GB:.2f} GB, pinned budget "
        f"{'none' if pipe.pinned_budget is None else f'{pipe.pinned_budget / GB:.1f} GB'}"
    )
    # (d) first, then each quantity alone, then (d) as it ran before issue 30's fix: in
    # layer groups past the batch budget (its programs compile anew): as time allows.
    before = dataclasses.replace(budgets, example_bytes=None)
    cases = [("full", FULL, budgets), *((q, (q,), budgets) for q in FULL)]
    cases.append(("full_grouped_before", FULL, before))
    for case, what, case_budgets in cases:
        if time.perf_counter() - start > seconds:
            print(f"split {case}: skipped (past --seconds {seconds:.0f})")
            continue
        pipe.budgets = case_budgets
        try:
            result[case] = split_case(engine, texts, kept, what, repeats, held)
        finally:
            pipe.budgets = budgets
        row = result[case]
        print(
            f"split {case:19s}: {row['best_s']:7.3f} s (first {row['first_pass_s']:5.1f} s), "
            f"{row['bytes'] / GB:6.2f} GB, {row['host_gb_s']:6.2f} GB/s; plan: {row['plan']}; "
            f"held pinned {row['pinned_bytes'] / GB:.2f} GB, copied out "
            f"{row['copied_out_bytes'] / GB:.2f} GB, assembled from groups "
            f"{row['assembled_bytes'] / GB:.2f} GB"
        )
        if case == "full":  # one (d) call's device timeline
            traced, summary = traced_call(lambda: engine.capture(texts, what=FULL))
            row["traced_s"], result["full_trace"] = traced, summary
            print(f"split full traced: {traced:.3f} s")
            for line in device_trace.describe(summary):
                print(f"split full {line}")
    write_json(json_path, result)


def split_case(engine, texts, kept, what, repeats: int, held: list) -> dict:
    """One `split` case: `Engine.capture` of `what`, the first pass (compile) and the
    best of `repeats`, its plan (batch sizes; layer groups) and how its last call held
    its results (`held`: the calls' `host.HeldResults`, which `holding` appends to)."""
    pipe = engine.pipeline
    spec = engine.make_spec(what)
    sizes = pipe.group_sizes(kept, spec)
    whole = [e for e, size in zip(kept, sizes, strict=True) if not size]
    batches = [b.size for b in pipe.plan(whole, spec)] if whole else []
    grouped = [size for size in sizes if size]
    one = engine.output_bytes(spec, kept[0].length)  # texts of one length
    plan = ", ".join(
        ([f"batches of {batches}"] if batches else [])
        + ([f"{len(grouped)} in groups of {grouped[0]} layers"] if grouped else [])
    )
    t = time.perf_counter()
    engine.capture(texts, what=what)  # compiles
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        del held[:]
        t = time.perf_counter()
        engine.capture(texts, what=what)
        best = min(best, time.perf_counter() - t)
    nbytes = len(texts) * one
    return {
        "first_pass_s": first,
        "best_s": best,
        "bytes": nbytes,
        "host_gb_s": nbytes / best / GB,
        "plan": plan,
        "batches": batches,
        "group_layers": grouped,
        "pinned_bytes": held[-1].pinned,
        "copied_out_bytes": held[-1].copied,
        "assembled_bytes": len(grouped) * one,  # grouped texts' parts copied into whole arrays
    }


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


def serve_child(
    model: str, extra: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """`jaxattn serve` on `model`, port 0, in a child process (`env`: its environment, None:
    this one's): (process, address). Its output is echoed, prefixed, by a thread."""
    cmd = [sys.executable, "-u", "-m", "jaxattn", "serve", "--model", model, "--port", "0", *extra]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
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


def _client_worker(conn, address: str, tokens: int, request: int) -> None:
    """A client process of `service`: its own AttentionClient; each job (dtype, codec,
    requests) sends that many requests of `request` texts one after another and answers
    (texts, wire bytes, decoded bytes); None ends it."""
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.client import AttentionClient

    client = AttentionClient(address, timeout=600)
    texts = synthetic_texts(tokens, request)
    conn.send("ready")
    while (job := conn.recv()) is not None:
        dtype, codec, requests = job
        wire0, decoded = client.wire_bytes, 0
        for _ in range(requests):
            got = client.capture(texts, dtype=dtype, codec=codec)
            decoded += sum(c.tensors["attention"].nbytes for c in got)
        conn.send((requests * request, client.wire_bytes - wire0, decoded))
    client.close()


class ClientProcesses:
    """`clients` processes, each its own AttentionClient (`_client_worker`): no client
    shares a GIL. `round` splits the requests among them and waits for all."""

    def __init__(self, address: str, tokens: int, request: int, clients: int):
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")  # no fork of a process holding gRPC
        self.conns, self.procs = [], []
        for _ in range(clients):
            here, there = spawn.Pipe()
            proc = spawn.Process(
                target=_client_worker, args=(there, address, tokens, request), daemon=True
            )
            proc.start()
            self.conns.append(here)
            self.procs.append(proc)
        for conn in self.conns:
            if conn.recv() != "ready":
                raise RuntimeError("a client process did not start")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def round(self, dtype: str, codec: str, requests: int) -> tuple[int, int, int]:
        """(texts, wire bytes, decoded bytes) of `requests` requests spread over the clients."""
        share = [len(range(i, requests, len(self.conns))) for i in range(len(self.conns))]
        for conn, k in zip(self.conns, share, strict=True):
            conn.send((dtype, codec, k))
        done = [self._answer(i) for i in range(len(self.conns))]
        return tuple(sum(column) for column in zip(*done, strict=True))

    def _answer(self, i: int):
        """Client process `i`'s answer to its job; a RuntimeError naming it where it died
        (its traceback is on stderr, above)."""
        try:
            return self.conns[i].recv()
        except EOFError:
            proc = self.procs[i]
            proc.join(timeout=5)
            raise RuntimeError(
                f"client process {i + 1} of {len(self.procs)} (pid {proc.pid}) exited "
                f"({proc.exitcode}) during a round: its error is above"
            ) from None

    def close(self) -> None:
        """End every client process; one that died already is only reaped."""
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:  # BrokenPipeError: that client is gone
                pass
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()


class ClientThreads:
    """`clients` threads of this process sharing one AttentionClient (as a server's
    callers in one process would): `round` as `ClientProcesses.round`."""

    def __init__(self, address: str, tokens: int, request: int, clients: int):
        from jaxattn.bench.capture import synthetic_texts
        from jaxattn.client import AttentionClient

        self.client = AttentionClient(address, timeout=600)
        self.texts, self.clients, self.pids = (
            synthetic_texts(tokens, request),
            clients,
            [os.getpid()],
        )

    def round(self, dtype: str, codec: str, requests: int) -> tuple[int, int, int]:
        from concurrent.futures import ThreadPoolExecutor

        def send(_):
            got = self.client.capture(self.texts, dtype=dtype, codec=codec)
            return sum(c.tensors["attention"].nbytes for c in got)

        wire0 = self.client.wire_bytes
        with ThreadPoolExecutor(self.clients) as pool:
            decoded = sum(pool.map(send, range(requests)))
        return requests * len(self.texts), self.client.wire_bytes - wire0, decoded

    def close(self) -> None:
        self.client.close()


# service: (dtype, codec) of the rounds, the most telling first (issue 26's target).
SERVICE_CODECS = (("uint8", "zstd"), ("float32", "none"))
# service: the codec pool's threads of its second server (the GPU host's 16 cores).
CODEC_THREADS = 16


def service(
    tokens: int,
    n: int,
    request: int,
    clients: int,
    tiny: bool,
    json_path: Path | None,
    model: str | None = None,
) -> None:
    """The `service` check (module doc): a server at highest, every codec; then one with
    CODEC_THREADS codec threads, uint8 + zstd once each way."""
    result = {
        "tokens": tokens,
        "request_texts": request,
        "clients": clients,
        "model": "tiny" if tiny else "bert-base",
        "rounds": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = model or str(model_dir(Path(tmp), tiny))
        pool = f"codec{CODEC_THREADS}"
        for server, codecs, repeats in (("", SERVICE_CODECS, 2), (pool, SERVICE_CODECS[:1], 1)):
            env = {**os.environ, "JAXATTN_CODEC_THREADS": str(CODEC_THREADS)} if server else None
            proc, address = serve_child(
                path, ["--max-texts", str(request), "--precision", "highest"], env
            )
            modes = {}
            try:
                modes["threads"] = ClientThreads(address, tokens, request, clients)
                modes["processes"] = ClientProcesses(address, tokens, request, clients)
                for dtype, codec in codecs:
                    key = (f"{server}_" if server else "") + f"{dtype}_{codec}"
                    count = n if dtype == "uint8" else max(n // 2, clients * request)
                    requests = max(1, count // request)
                    # The warm-up, a round each way: the server compiles the shapes its batcher
                    # makes of either arrival pattern (a compile inside a timed round costs
                    # seconds on a GPU).
                    result[f"{key}_warmup_s"] = [
                        service_round(proc.pid, c, dtype, codec, requests)["seconds"]
                        for c in modes.values()
                    ]
                    for mode, clients_of in modes.items():
                        rows = [
                            service_round(proc.pid, clients_of, dtype, codec, requests)
                            for _ in range(repeats)
                        ]
                        for row in rows:
                            row.update(
                                precision="highest",
                                codec_threads=CODEC_THREADS if server else None,
                                codec=f"{dtype}_{codec}",
                                mode=mode,
                            )
                        result["rounds"] += rows
                        name = key + ("" if mode == "threads" else "_processes")
                        best = min(rows, key=lambda r: r["seconds"])
                        report_round(result, name, best, clients, tokens, request)
                        write_json(json_path, result)  # a step cut off keeps what it measured
            finally:
                try:
                    for clients_of in modes.values():
                        clients_of.close()
                finally:  # the server stops whatever its clients did: it holds the GPU
                    proc.terminate()
                    proc.wait(timeout=60)
    ratios = {
        "uint8_zstd processes / threads": ("uint8_zstd_processes", "uint8_zstd"),
        "float32_none processes / threads": ("float32_none_processes", "float32_none"),
        f"uint8_zstd processes with {CODEC_THREADS} codec threads / the default": (
            f"codec{CODEC_THREADS}_uint8_zstd_processes",
            "uint8_zstd_processes",
        ),
    }
    line = []
    for label, (a, b) in ratios.items():
        result[f"{a}_over_{b}"] = ratio = result[f"{a}_seq_per_s"] / result[f"{b}_seq_per_s"]
        line.append(f"{label} {ratio:.2f}x")
    print("service: " + "; ".join(line))
    write_json(json_path, result)


def service_round(server: int, clients_of, dtype: str, codec: str, requests: int) -> dict:
    """One round of `requests` requests through `clients_of` (ClientThreads or
    ClientProcesses): its seconds, texts, bytes, and the CPU seconds (/proc) of the
    server process and of the client processes."""
    from service_scale import cpu_seconds

    pids = (server, *clients_of.pids)
    cpu0 = [cpu_seconds(p) for p in pids]
    codec0 = codec_thread_cpu(server)
    t = time.perf_counter()
    texts, wire, decoded = clients_of.round(dtype, codec, requests)
    seconds = time.perf_counter() - t
    cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    return dict(
        seconds=seconds,
        texts=texts,
        wire_bytes=wire,
        decoded_bytes=decoded,
        server_cpu_s=cpu[0],
        server_codec_cpu_s=codec_thread_cpu(server) - codec0,
        clients_cpu_s=sum(cpu[1:]),
    )


def codec_thread_cpu(pid: int) -> float:
    """User + system CPU seconds so far of the process's codec threads (those the system
    names `codec_pool.THREAD_NAME`, /proc/PID/task/*/comm: they live as long as it)."""
    from jaxattn.wire.codec_pool import THREAD_NAME

    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != THREAD_NAME:
                continue
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # the thread ended meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def report_round(result: dict, name: str, row: dict, clients: int, tokens: int, request: int):
    """A round's line and its figures in `result` under `name`: seq/s, the wire, and the
    CPU seconds of the server and the clients (a round's, and per decoded GB)."""
    wall, seqs, gb = row["seconds"], row["texts"], row["decoded_bytes"] / 1e9
    server, mine, codec = row["server_cpu_s"], row["clients_cpu_s"], row["server_codec_cpu_s"]
    figures = {
        "seq_per_s": seqs / wall,
        "wire_bytes_per_seq": row["wire_bytes"] / seqs,
        "decoded_bytes_per_seq": row["decoded_bytes"] / seqs,
        "server_cpu_s": server,
        "server_codec_cpu_s": codec,
        "clients_cpu_s": mine,
        "server_cpu_s_per_decoded_gb": server / gb,
        "clients_cpu_s_per_decoded_gb": mine / gb,
    }
    result.update({f"{name}_{k}": v for k, v in figures.items()})
    print(
        f"service {name:30s}: {seqs} texts of {tokens} tokens, {clients} clients x {request}: "
        f"{seqs / wall:8.1f} seq/s, {row['wire_bytes'] / seqs / 1e6:.2f} MB a text on the wire "
        f"({row['wire_bytes'] / wall / 1e9:.2f} GB/s); CPU s in the round's {wall:.2f} s: "
        f"server {server:.1f} ({server / wall:.1f} cores; its codec threads {codec:.1f}, "
        f"{codec / wall:.1f} cores), clients {mine:.1f} "
        f"({mine / wall:.1f} cores); a decoded GB: server {server / gb:.1f} s, clients "
        f"{mine / gb:.1f} s",
        flush=True,
    )


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
        "sanity-families",
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
        "split",
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
    p.add_argument("-n", type=int, default=1024, help="precision, overlap, service, split: texts")
    p.add_argument("--repeats", type=int, default=3, help="precision, overlap, split: timed rounds")
    p.add_argument("--request", type=int, default=256, help="service: texts a request")
    p.add_argument("--clients", type=int, default=4, help="service: concurrent requests")
    p.add_argument("--tiny", action="store_true", help="the tiny BERT instead of BERT-base")
    p.add_argument(
        "--host-memory",
        help="shape, profile, split: the engine's host_memory (auto; profile: staged)",
    )
    p.add_argument("--trace-out", type=Path, help="profile: keep the perfetto trace (.json.gz)")
    p.add_argument(
        "--precision", default="highest", help="shape: the compute precision (overlap: a list)"
    )
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument(
        "--model", help="warmup, service, split: a checkpoint (default: random BERT-base)"
    )
    p.add_argument("--save", type=Path, help="checkpoint: the folder to write it in")
    p.add_argument(
        "--synthetic",
        default="bert-base",
        help="checkpoint: a jaxattn.bench.synthetic preset (with --tiny: its family's tiny model)",
    )
    p.add_argument(
        "--seconds", type=float, default=45.0, help="split: start no case past this many seconds"
    )
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
    if args.check == "sanity-families":
        return 0 if sanity_families(args.json) else 1
    if args.check == "fast-forward":
        return 0 if fast_forward(args.tokens, args.tiny, args.json) else 1
    args.tokens = args.tokens[0]
    if args.check == "checkpoint":  # the random BERT-base (or tiny) for other scripts
        print(model_dir(args.save, args.tiny, args.synthetic))
    elif args.check == "split":
        if not args.model:
            raise SystemExit("split: give --model (a checkpoint: `checkpoint --save`)")
        split(
            args.model,
            args.tokens,
            args.n,
            args.repeats,
            args.precision,
            args.seconds,
            args.json,
            args.host_memory,
        )
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
        service(args.tokens, args.n, args.request, args.clients, args.tiny, args.json, args.model)
    elif args.check == "shape":
        shape(what, args.tokens, args.tiny, args.host_memory or "auto", args.precision)
    else:
        buckets = tuple(int(b) for b in args.buckets.split(",")) if args.buckets else None
        warmup(what, args.model, buckets, args.sizes, args.tiny)
    return 0


if __name__ == "__main__":
    sys.exit(main())
