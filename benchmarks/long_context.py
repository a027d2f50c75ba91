"""Long context (issue 31): a ModernBERT-base-shaped random model at 1k-8k tokens on the CPU,
a Llama-3.2-1B-shaped one at 8k and 32k on a GPU.

    python benchmarks/long_context.py --out benchmarks/results/DATE-long-cpu
    python benchmarks/long_context.py --lengths 1024 --tiny      # a quick check of the script
    python benchmarks/long_context.py --preset llama-1b --lengths 8192,32768 --query-rows 256

One text of exactly T tokens (`jaxattn.bench.capture.synthetic_texts`) through the
`modernbert-base` preset of `jaxattn.bench.synthetic` (22 layers, 12 heads, hidden 768,
8,192 positions, random weights). The request: `head_stats` of every layer and head, plus
the `attention` map of two heads (0 and 1) of the last layer (a global one), two
captures, as one spec names one selection of layers and heads. jaxattn runs with
`--attention` (default "auto": blockwise from `blockwise.AUTO_MIN_LENGTH` tokens) and
buckets at the measured lengths.
Each (length, side) runs in a fresh process: the first request (compiles included),
then the same request again (timed) unless the first took over `AGAIN_S`,
and the peak RSS of the process (VmHWM), its size before the first request, and the
peak above where it stood just before the timed request. transformers' eager path
(ModernBertModel, attn_implementation="eager", output_attentions=True: every layer's
and head's map, what it has to return for any head) runs where its maps fit:
where its returned float32 maps (L x H x T^2 x 4 bytes) fit: under 80% of the GPU's
memory on a GPU, under half the machine's memory on the CPU (the 22 x 12 maps are 4.4 GB
at 2,048 tokens, 17.7 GB at 4,096, 70.9 GB at 8,192), and not past `--eager-max` tokens;
on a GPU its maps stay on the card (not copied to the host, which jaxattn's are).

`--preset llama-1b` is the `llama-1b` preset instead (Llama-3.2-1B: 16 layers, 32 query
and 8 key/value heads, hidden 2048, head dim 64, llama3 RoPE scaling, 131,072
positions): `decoder_head_stats` of every layer and head plus the maps of heads 0 and 1
of layer 15. `--precision` sets jaxattn's compute precision (transformers stays float32:
it runs at "highest" only). `--query-rows N` also times, first, the maps of the last N
query rows alone (`query_positions="-N:"`). On a GPU each process also reports the
device's peak memory in use (`jax.Device.memory_stats()` peak_bytes_in_use; torch's
max_memory_allocated for eager), and each jaxattn row the placed weights' MiB
(`weights_mib`): what of that peak is not the request's.

`--block N[,N...]` runs jaxattn at each blockwise block size (`attention_block`; default:
the engine's, `blockwise.BLOCK`), ascending, each in a fresh process (a device's peak
memory is per process), `--attention blockwise` unless another is named; each row records
`attention_block` (as asked) and `block` (what the request ran at, 0: dense), and the
table has a block column where more than one ran. `--stats-only` asks
for the statistics alone (no maps, no `--query-rows`; transformers is not run: it
returns every map whatever is asked).

    python benchmarks/long_context.py --lengths 4096 --block 128,256,512,1024 --stats-only

Writes raw.jsonl (one line per process) and table.md under --out, and prints the JSON
lines and the table.

    python benchmarks/long_context.py --crossover --lengths 512,1024,2048 --layers 3

`--crossover` measures where the blockwise path starts to beat the dense one
(`jaxattn.engine.blockwise.AUTO_MIN_LENGTH`): each length and request kind (`stats`:
`head_stats` of every layer and head; `map`: the `attention` map of head 0 of the last
layer) runs once with attention="dense" and once with "blockwise", each in a fresh
process (the first request compiles; then the best of `REPEATS` and the peak RSS
above where it stood before them), on the same ModernBERT-base-wide model (`--layers`
of them, default 3: one global layer to two local ones, as in the 22-layer model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADS = (0, 1)  # the maps: two heads of the last layer (ModernBERT's 21: global, 21 % 3 == 0)
TINY = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, intermediate_size=96)
TINY_LLAMA = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=96,
)
# preset -> (transformers model class for eager, the statistics asked for, its tiny overrides)
PRESETS = {
    "modernbert-base": ("ModernBertModel", "head_stats", TINY),
    "llama-1b": ("LlamaModel", "decoder_head_stats", TINY_LLAMA),
}


def blocks(value: str) -> list[int]:
    """'1024,256' -> [256, 1024]: block sizes >= 1, ascending, each once."""
    try:
        out = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected block sizes N[,N...], got {value!r}") from None
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"block sizes are whole numbers >= 1, got {value!r}")
    return out


def kib(field: str) -> int:
    """A line of /proc/self/status in KiB (VmRSS now, VmHWM the peak since the last reset)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM restarts here (Linux >= 4.0)
        f.write("5")


REPEATS = 3  # --crossover: the timed requests after the first (their best, their peak)
AGAIN_S = 150.0  # a first request longer than this is not repeated (the 8k one, 2 cores)


def measure(request) -> dict:
    """The request once (compiles, warm caches), and again, timed, unless the first took
    longer than AGAIN_S; the process's peak RSS restarted just before each. The figures
    of the second where it ran (`timed`: "second", with second_s), else of the first."""
    start = kib("VmRSS")
    reset_peak()
    t, cpu = time.perf_counter(), time.process_time()
    request()
    first = time.perf_counter() - t
    row = dict(first_s=first, loaded_rss_mib=start / 1024, first_peak_rss_mib=kib("VmHWM") / 1024)
    row["first_cpu_s"] = time.process_time() - cpu  # every thread's CPU seconds
    row |= dict(peak_rss_mib=kib("VmHWM") / 1024, grown_mib=(kib("VmHWM") - start) / 1024)
    row["timed"] = "first"
    if first <= AGAIN_S:
        before = kib("VmRSS")
        reset_peak()
        t, cpu = time.perf_counter(), time.process_time()
        request()
        row |= dict(second_s=time.perf_counter() - t, peak_rss_mib=kib("VmHWM") / 1024)
        row["second_cpu_s"] = time.process_time() - cpu
        row |= dict(grown_mib=(kib("VmHWM") - before) / 1024, timed="second")
    return row


def device_peak_mib() -> float | None:
    """The default device's peak memory in use so far, MiB (None where jax keeps no
    statistics: the CPU)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**20


def jax_leaves(tree) -> list:
    import jax

    return jax.tree.leaves(tree)


def jax_device() -> str:
    import jax

    return jax.devices()[0].device_kind


def jax_version() -> str:
    import jax

    return jax.__version__


def one_jaxattn(job: dict) -> dict:
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts

    length, layer = job["length"], job["layer"]
    # Buckets at the length measured: each text runs at exactly T.
    engine = jaxattn.load(
        job["model"],
        attention=job["attention"],
        attention_block=job.get("block"),
        buckets=(length,),
        precision=job["precision"],
    )
    texts = synthetic_texts(length, 1)
    maps = dict(what="attention", layers=[layer], heads=list(HEADS))
    row = {"block": engine.step.block_for(engine.make_spec(job["stats"]), length)}
    # The placed weights' bytes: what of a device peak is the weights (the rest is the
    # request's), as the fifth GPU session's reading had to work out by hand.
    row["weights_mib"] = sum(a.nbytes for a in jax_leaves(engine.step.params)) / 2**20
    # The last rows' maps first: the device's peak is the process's, never reset.
    if job.get("rows") and not job.get("stats_only"):

        def rows():
            got = engine.capture(texts, **maps, query_positions=f"-{job['rows']}:")[0]
            assert got.attention.shape == (1, len(HEADS), job["rows"], length)

        row |= {f"rows_{k}": v for k, v in measure(rows).items()}
        row["rows_peak_device_mib"] = device_peak_mib()

    def request():
        stats = engine.capture(texts, what=job["stats"])[0]
        if job.get("stats_only"):
            assert stats.length == length, (stats.length, length)
            return
        got = engine.capture(texts, **maps)[0]
        assert stats.length == got.length == length, (stats.length, length)
        assert got.attention.shape == (1, len(HEADS), length, length)

    row |= measure(request) | {"peak_device_mib": device_peak_mib()}
    return row | {"device": f"{jax_device()} (jax {jax_version()})"}


def one_path(model: str, length: int, layer: int, policy: str, kind: str) -> dict:
    """One `--crossover` process: request `kind` ("stats" or "map") on path `policy`."""
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts

    engine = jaxattn.load(model, attention=policy, buckets=(length,))
    texts = synthetic_texts(length, 1)
    ask = dict(what="head_stats") if kind == "stats" else {}
    if kind == "map":
        ask = dict(what="attention", layers=[layer], heads=[0])

    def request():
        got = engine.capture(texts, **ask)[0]
        assert got.length == length, (got.length, length)

    block = engine.step.block_for(engine.make_spec(**ask), length)
    start = kib("VmRSS")
    t = time.perf_counter()
    request()  # compiles
    row = dict(first_s=time.perf_counter() - t, block=block, timed=f"best of {REPEATS}")
    before = kib("VmRSS")
    reset_peak()
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        request()
        times.append(time.perf_counter() - t)
    peak = kib("VmHWM")
    return row | dict(
        second_s=min(times),
        loaded_rss_mib=start / 1024,
        peak_rss_mib=peak / 1024,
        grown_mib=(peak - before) / 1024,
    )


def crossover_table(rows: list[dict]) -> str:
    """Dense against blockwise per (T, request): the second request's seconds and growth."""
    lines = [
        "| T | request | dense s | blockwise s | blockwise / dense time | dense grown MB | "
        "blockwise grown MB | dense peak RSS GB | blockwise peak RSS GB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in sorted({r["tokens"] for r in rows}):
        for kind in ("stats", "map"):
            got = {r["side"]: r for r in rows if r["tokens"] == t and r.get("kind") == kind}
            d, b = got.get("dense", {}), got.get("blockwise", {})
            if not d or not b:
                continue
            if "error" in d or "error" in b:
                lines.append(f"| {t:,} | {kind} | {d.get('error', '')} | {b.get('error', '')} |")
                continue
            ds, bs = d.get("second_s", d["first_s"]), b.get("second_s", b["first_s"])
            lines.append(
                f"| {t:,} | {kind} | {ds:.2f} | {bs:.2f} | {bs / ds:.2f}x | "
                f"{d['grown_mib'] * 1.048576:.0f} | {b['grown_mib'] * 1.048576:.0f} | "
                f"{d['peak_rss_mib'] / 1024:.2f} | {b['peak_rss_mib'] / 1024:.2f} |"
            )
    return "\n".join(lines)


def crossover(model: str, lengths: list[int], layer: int) -> list[dict]:
    rows = []
    for length in lengths:
        for kind in ("stats", "map"):
            for policy in ("dense", "blockwise"):
                cmd = [sys.executable, __file__, "--path", policy, kind, model, str(length)]
                p = subprocess.run(cmd + [str(layer)], capture_output=True, text=True)
                row = dict(side=policy, kind=kind, tokens=length)
                if p.returncode != 0:
                    row["error"] = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                else:
                    row |= json.loads(p.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def eager_room(layers: int, heads: int, length: int) -> tuple[bool, str]:
    """Whether transformers' eager maps (L x H x T^2 float32, returned) fit here: under
    80% of the GPU's memory, or half the machine's; and the reason where not."""
    import torch

    need = layers * heads * length**2 * 4
    if torch.cuda.is_available():
        have, where = torch.cuda.get_device_properties(0).total_memory, "the GPU"
        room = 0.8 * have
    else:
        have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "the machine"
        room = 0.5 * have
    why = f"not run: its returned maps alone are {need / 1e9:.1f} GB ({where}: {have / 1e9:.0f} GB)"
    return need <= room, why


def one_eager(job: dict) -> dict:
    import torch
    import transformers

    model, length, layer = job["model"], job["length"], job["layer"]
    config = transformers.AutoConfig.from_pretrained(model)
    fits, why = eager_room(config.num_hidden_layers, config.num_attention_heads, length)
    if not fits:
        return dict(skipped=why)
    torch.set_num_threads(os.cpu_count() or 1)
    cls = getattr(transformers, PRESETS[job["preset"]][0])
    net = cls.from_pretrained(model, attn_implementation="eager").eval()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = net.to(device)
    ids = torch.full((1, length), 1037)
    ids[0, 0], ids[0, -1] = 101, 102
    ids = ids.to(device)

    def request():  # every layer's and head's maps: what eager returns, whatever is asked
        with torch.no_grad():
            out = net(input_ids=ids, output_attentions=True)
        assert out.attentions[layer].shape == (1, net.config.num_attention_heads, length, length)
        if device == "cuda":
            torch.cuda.synchronize()

    row = measure(request)
    if device == "cuda":
        row["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return row


def run_one(job: dict) -> dict:
    """One (side, length) in a fresh process: its figures, or why it failed."""
    cmd = [sys.executable, __file__, "--one", json.dumps(job)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    row = dict(side=job["side"], tokens=job["length"], precision=job["precision"])
    if job["side"] == "jaxattn":
        row["attention_block"] = job.get("block")  # as asked (None: the engine's)
    if p.returncode != 0:
        return row | dict(error=(p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    return row | json.loads(p.stdout.strip().splitlines()[-1]) | {"wall_s": time.perf_counter() - t}


def table(rows: list[dict]) -> str:
    """One line per (T, block) of jaxattn beside transformers' at that T; a block column
    where a block size was asked (--block: one alone too)."""
    device = any(r.get("peak_device_mib") for r in rows)  # a GPU: its peaks too
    jax_rows = [r for r in rows if r["side"] == "jaxattn"]
    blocks = any(r.get("attention_block") is not None for r in jax_rows)
    shown = set()  # the lengths whose eager cells are on an earlier line
    extra = " jaxattn device peak GB | eager device peak GB |" if device else ""
    lines = [
        "| T |"
        + (" block |" if blocks else "")
        + " jaxattn s (first, compiles) | jaxattn s (second) | jaxattn peak RSS GB | grown GB | "
        "eager s | eager peak RSS GB | eager grown GB | time jaxattn / eager | "
        "peak RSS jaxattn / eager |" + extra,
        "|---|"
        + ("---|" if blocks else "")
        + "---|---|---|---|---|---|---|---|---|"
        + ("---|---|" if device else ""),
    ]
    for j in sorted(jax_rows, key=lambda r: (r["tokens"], r.get("attention_block") or 0)):
        t = j["tokens"]
        e = next((r for r in rows if r["tokens"] == t and r["side"] == "eager"), {})
        again = t in shown
        shown.add(t)

        def cells(r, keys):
            if "error" in r:
                return [r["error"]] + [""] * (len(keys) - 1)
            if "skipped" in r:
                return [r["skipped"]] + [""] * (len(keys) - 1)
            return [
                ""
                if not r
                else "not repeated"
                if k not in r
                else f"{r[k] / 1024:.2f}"
                if k.endswith("mib")
                else f"{r[k]:.2f}"
                for k in keys
            ]

        both = "second_s" in j and "second_s" in e
        ratio = f"{j['second_s'] / e['second_s']:.2f}x | " if both else " | "
        ratio += f"{j['peak_rss_mib'] / e['peak_rss_mib']:.2f}x" if both else ""
        cols = cells(j, ["first_s", "second_s", "peak_rss_mib", "grown_mib"])
        cols += [""] * 3 if again else cells(e, ["second_s", "peak_rss_mib", "grown_mib"])
        peaks = ""
        if device:
            peaks = (
                " "
                + " | ".join(
                    f"{r['peak_device_mib'] / 1024:.2f}" if r.get("peak_device_mib") else ""
                    for r in (j, e)
                )
                + " |"
            )
        ran = j.get("block")  # 0: the dense path ran (auto under its threshold)
        block = f" {'dense' if ran == 0 else ran if ran else j.get('attention_block')} |"
        lines.append(f"| {t:,} |" + (block if blocks else "") + " " + " | ".join(cols))
        lines[-1] += f" | {ratio} |" + peaks
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", metavar="JOB", help=argparse.SUPPRESS)  # a child: JSON
    p.add_argument(
        "--path", nargs=5, metavar=("POLICY", "KIND", "MODEL", "T", "LAYER"), help=argparse.SUPPRESS
    )
    p.add_argument("--lengths", default="1024,2048,4096,8192")
    p.add_argument("--crossover", action="store_true", help="dense against blockwise")
    p.add_argument("--layers", type=int, default=3, help="--crossover: the model's layers")
    p.add_argument("--eager-max", type=int, help="longest T for transformers (default: fit)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="modernbert-base")
    p.add_argument("--precision", default="highest", help="jaxattn's compute precision")
    p.add_argument(
        "--attention",
        help="jaxattn's attention policy (auto, dense, blockwise; default auto, blockwise "
        "with --block)",
    )
    p.add_argument("--query-rows", type=int, default=0, help="also the last N rows' maps")
    p.add_argument(
        "--block",
        type=blocks,
        help="jaxattn's blockwise block sizes, N[,N...], each in a process of its own "
        "(default: the engine's); --attention defaults to blockwise with it",
    )
    p.add_argument(
        "--stats-only",
        action="store_true",
        help="only the statistics request (no maps, no --query-rows, no transformers)",
    )
    p.add_argument("--tiny", action="store_true", help="a tiny model of the same family")
    p.add_argument(
        "--model-dir",
        type=Path,
        help="keep the random checkpoint here and reuse it when there (default: a temp dir)",
    )
    p.add_argument(
        "--prepare", action="store_true", help="only write the checkpoint into --model-dir"
    )
    p.add_argument("--out", type=Path, help="write raw.jsonl and table.md here")
    args = p.parse_args()
    if args.prepare and not args.model_dir:
        p.error("--prepare writes the checkpoint into --model-dir: name one")
    if args.crossover and (args.block or args.stats_only):
        p.error("--block and --stats-only time the long runs, not --crossover")
    if args.attention is None:
        args.attention = "blockwise" if args.block else "auto"
    if args.one:
        job = json.loads(args.one)
        print(json.dumps((one_jaxattn if job["side"] == "jaxattn" else one_eager)(job)))
        return
    if args.path:
        policy, kind, model, length, layer = args.path
        print(json.dumps(one_path(model, int(length), int(layer), policy, kind)))
        return
    from jaxattn.bench.synthetic import random_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        _, stats, tiny = PRESETS[args.preset]
        overrides = tiny if args.tiny else {}
        if args.crossover:
            overrides = dict(overrides, num_hidden_layers=args.layers)
        where = args.model_dir or Path(tmp)
        if (where / "config.json").exists():  # written by an earlier run (one checkpoint)
            model = str(where)
        else:
            model = str(random_checkpoint(args.preset, where, **overrides))
        if args.prepare:
            print(f"checkpoint {model}")
            return
        config = json.loads((Path(model) / "config.json").read_text())
        layer = config["num_hidden_layers"] - 1
        lengths = [int(t) for t in args.lengths.split(",")]
        if args.crossover:
            rows = crossover(model, lengths, layer)
            lengths = []
        for length in lengths:
            sides = [("jaxattn", block) for block in args.block or [None]] + [("eager", None)]
            for side, block in sides:
                job = dict(side=side, model=model, length=length, layer=layer, stats=stats)
                job |= dict(preset=args.preset, precision=args.precision, rows=args.query_rows)
                job |= dict(attention=args.attention, block=block, stats_only=args.stats_only)
                row = dict(side=side, tokens=length, precision=args.precision)
                if side == "eager" and args.stats_only:
                    row["skipped"] = "not run: --stats-only (transformers returns every map)"
                elif side == "eager" and args.precision != "highest":
                    row["skipped"] = "not run: transformers runs float32 (see highest)"
                elif side == "eager" and args.eager_max and length > args.eager_max:
                    row["skipped"] = f"not run: over --eager-max {args.eager_max}"
                else:
                    row = run_one(job)
                rows.append(row)
                print(json.dumps(row), flush=True)
    header = (
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; {args.preset}"
        f"{' (tiny)' if args.tiny else ''}, precision {args.precision}"
        f"{', statistics only' if args.stats_only else ''}"
    )
    gpus = [r["device"] for r in rows if r.get("device")]
    if gpus:
        header += f", {gpus[0]}"
    text = header + "\n\n" + (crossover_table if args.crossover else table)(rows) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "table.md").write_text(text)


if __name__ == "__main__":
    main()
