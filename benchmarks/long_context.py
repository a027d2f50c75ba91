"""Long context on the CPU (issue 31): a ModernBERT-base-shaped random model at 1k-8k tokens.

    python benchmarks/long_context.py --out benchmarks/results/DATE-long-cpu
    python benchmarks/long_context.py --lengths 1024 --tiny      # a quick check of the script

One text of exactly T tokens (`jaxattn.bench.capture.synthetic_texts`) through the
`modernbert-base` preset of `jaxattn.bench.synthetic` (22 layers, 12 heads, hidden 768,
8,192 positions, random weights). The request: `head_stats` of every layer and head, plus
the `attention` map of two heads (0 and 1) of the last layer (a global one), two
captures, as one spec names one selection of layers and heads. jaxattn runs with
attention="auto" (blockwise from 1,024 tokens) and buckets at the measured lengths.
Each (length, side) runs in a fresh process: the first request (compiles included),
then the same request again (timed) unless the first took over `AGAIN_S`,
and the peak RSS of the process (VmHWM), its size before the first request, and the
peak above where it stood just before the timed request. transformers' eager path
(ModernBertModel, attn_implementation="eager", output_attentions=True: every layer's
and head's map, what it has to return for any head) runs where its maps fit:
`--eager-max` tokens (default 2,048: at 4,096 the 22 x 12 returned float32 maps alone
are 17.7 GB, 70.9 GB at 8,192, on a 24 GB machine).

Writes raw.jsonl (one line per process) and table.md under --out, and prints the table.
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

LAYER, HEADS = 21, (0, 1)  # the map: two heads of the last layer (global: 21 % 3 == 0)
TINY = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, intermediate_size=96)


def kib(field: str) -> int:
    """A line of /proc/self/status in KiB (VmRSS now, VmHWM the peak since the last reset)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM restarts here (Linux >= 4.0)
        f.write("5")


AGAIN_S = 150.0  # a first request longer than this is not repeated (the 8k one, 2 cores)


def measure(request) -> dict:
    """The request once (compiles, warm caches), and again, timed, unless the first took
    longer than AGAIN_S; the process's peak RSS restarted just before each. The figures
    of the second where it ran (`timed`: "second", with second_s), else of the first."""
    start = kib("VmRSS")
    reset_peak()
    t = time.perf_counter()
    request()
    first = time.perf_counter() - t
    row = dict(first_s=first, loaded_rss_mib=start / 1024, first_peak_rss_mib=kib("VmHWM") / 1024)
    row |= dict(peak_rss_mib=kib("VmHWM") / 1024, grown_mib=(kib("VmHWM") - start) / 1024)
    row["timed"] = "first"
    if first <= AGAIN_S:
        before = kib("VmRSS")
        reset_peak()
        t = time.perf_counter()
        request()
        row |= dict(second_s=time.perf_counter() - t, peak_rss_mib=kib("VmHWM") / 1024)
        row |= dict(grown_mib=(kib("VmHWM") - before) / 1024, timed="second")
    return row


def one_jaxattn(model: str, length: int, layer: int) -> dict:
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts

    # Buckets at the lengths measured: the default ladder ends at 512 and pads every longer
    # text to the model's maximum (8,192), so each length would run at 8,192.
    engine = jaxattn.load(model, attention="auto", buckets=(512, 1024, 2048, 4096, 8192))
    texts = synthetic_texts(length, 1)

    def request():
        stats = engine.capture(texts, what="head_stats")[0]
        maps = engine.capture(texts, what="attention", layers=[layer], heads=list(HEADS))[0]
        assert stats.length == maps.length == length, (stats.length, length)
        assert maps.attention.shape == (1, len(HEADS), length, length)

    block = engine.step.block_for(engine.make_spec("head_stats"), length)
    return measure(request) | {"block": block}


def one_eager(model: str, length: int, layer: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    net = transformers.ModernBertModel.from_pretrained(model, attn_implementation="eager").eval()
    ids = torch.full((1, length), 1037)
    ids[0, 0], ids[0, -1] = 101, 102

    def request():  # every layer's and head's maps: what eager returns, whatever is asked
        with torch.no_grad():
            out = net(input_ids=ids, output_attentions=True)
        assert out.attentions[layer].shape == (1, net.config.num_attention_heads, length, length)

    return measure(request)


def run_one(side: str, model: str, length: int, layer: int) -> dict:
    """One (side, length) in a fresh process: its figures, or why it failed."""
    cmd = [sys.executable, __file__, "--one", side, model, str(length), str(layer)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    row = dict(side=side, tokens=length)
    if p.returncode != 0:
        return row | dict(error=(p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    return row | json.loads(p.stdout.strip().splitlines()[-1]) | {"wall_s": time.perf_counter() - t}


def table(rows: list[dict]) -> str:
    lines = [
        "| T | jaxattn s (first, compiles) | jaxattn s (second) | jaxattn peak RSS GB | grown GB | "
        "eager s | eager peak RSS GB | eager grown GB | time jaxattn / eager | "
        "peak RSS jaxattn / eager |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in sorted({r["tokens"] for r in rows}):
        j = next((r for r in rows if r["tokens"] == t and r["side"] == "jaxattn"), {})
        e = next((r for r in rows if r["tokens"] == t and r["side"] == "eager"), {})

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
                else f"{r[k]:.1f}"
                for k in keys
            ]

        both = "second_s" in j and "second_s" in e
        ratio = f"{j['second_s'] / e['second_s']:.2f}x | " if both else " | "
        ratio += f"{j['peak_rss_mib'] / e['peak_rss_mib']:.2f}x" if both else ""
        cols = cells(j, ["first_s", "second_s", "peak_rss_mib", "grown_mib"])
        cols += cells(e, ["second_s", "peak_rss_mib", "grown_mib"])
        lines.append(f"| {t:,} | " + " | ".join(cols) + f" | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--one", nargs=4, metavar=("SIDE", "MODEL", "T", "LAYER"), help=argparse.SUPPRESS
    )
    p.add_argument("--lengths", default="1024,2048,4096,8192")
    p.add_argument("--eager-max", type=int, default=2048, help="longest T for transformers")
    p.add_argument("--tiny", action="store_true", help="a tiny model of the same family")
    p.add_argument("--out", type=Path, help="write raw.jsonl and table.md here")
    args = p.parse_args()
    if args.one:
        side, model, length, layer = args.one
        one = one_jaxattn if side == "jaxattn" else one_eager
        print(json.dumps(one(model, int(length), int(layer))))
        return
    from jaxattn.bench.synthetic import random_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        overrides = TINY if args.tiny else {}
        model = str(random_checkpoint("modernbert-base", Path(tmp), **overrides))
        layer = overrides.get("num_hidden_layers", LAYER + 1) - 1
        for length in (int(t) for t in args.lengths.split(",")):
            for side in ("jaxattn", "eager"):
                if side == "eager" and length > args.eager_max:
                    gb = 22 * 12 * length**2 * 4 / 1e9
                    why = f"not run: its returned maps alone are {gb:.1f} GB (24 GB machine)"
                    row = dict(side=side, tokens=length, skipped=why)
                else:
                    row = run_one(side, model, length, layer)
                rows.append(row)
                print(json.dumps(row), flush=True)
    header = (
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}"
    )
    text = header + "\n\n" + table(rows) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "table.md").write_text(text)


if __name__ == "__main__":
    main()
