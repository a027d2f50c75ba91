"""`jaxattn view --global CORPUS... --out qk.html`: the joint query-key map of every head.

CORPUS is what `jaxattn view` reads (texts, input files, capture files, stores of
`jaxattn dump`; --limit counts examples over all of them). One pass over the
corpus: texts are captured window by window (queries, keys and attention, under
--layers/--heads/--precision/--too-long), saved captures read lazily; each
example's per-head moments are summed on the device (`jaxattn.engine.qk_map`)
and a seeded uniform sample of whole sentences (`--global-max-tokens`) is kept
for the page. Per head: keys translated to the queries' centroid, queries and
keys scaled to equal RMS norms, PCA to 2-D (always), and optionally t-SNE/UMAP
(`--global-reducer`). See docs/global-view.md.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import numpy as np

from jaxattn.cli.args import check_output, ensure_parent, positive, positive_float
from jaxattn.errors import InputError, UsageError
from jaxattn.progress import Progress

NEEDS = ("queries", "keys")
WHAT = ("attention", "queries", "keys")
WINDOW = 64  # texts captured per window


def add_arguments(parser) -> None:
    """Add this mode's own options to the view parser."""
    from jaxattn.engine.qk_reduce import REDUCERS
    from jaxattn.views.qk_map import ATTENTION_BYTES, MAX_TOKENS

    g = parser.add_argument_group("--global: the joint query-key map (docs/global-view.md)")
    g.add_argument("--global-reducer", choices=tuple(REDUCERS), default="pca",
                   help="the large map's layout: PCA (always made; the thumbnails are PCA), or "
                   "per selected head from the PCA start t-SNE (openTSNE: pip install "
                   "'jaxattn[layout]') or UMAP (pip install umap-learn); t-SNE takes ~1.5 min "
                   "per head of 20,000 points on 2 CPU cores (the default budget gives 40,000): "
                   "pick heads with --layers/--heads")  # fmt: skip
    g.add_argument("--global-max-tokens", type=positive, default=MAX_TOKENS, metavar="N",
                   help="tokens kept for the page (2 points each: query and key); a larger "
                   "corpus is sampled by whole sentences, uniformly; the page says so")  # fmt: skip
    g.add_argument("--global-seed", type=int, default=0, metavar="S",
                   help="seed of the sentence sample (default 0)")  # fmt: skip
    g.add_argument("--global-attention-mb", type=positive_float, metavar="MIB",
                   default=ATTENTION_BYTES / (1 << 20),
                   help="most MiB of compressed attention the page embeds for the click-through "
                   "head view (sampled sentences past it have none)")  # fmt: skip
    g.add_argument("--global-quiet", action="store_true", help="no progress line on stderr")


def _sources(args) -> tuple[list, int]:
    """[(what, items)] in INPUT order: ("saved", captures) or ("texts", texts); and the
    number of examples (at most --limit)."""
    from jaxattn.cli.corpus import read_input
    from jaxattn.cli.saved import open_saved, require
    from jaxattn.inputs import is_file_argument, split_pair

    parts, total, limit = [], 0, args.limit
    for arg in args.inputs:
        left = limit - total if limit else None
        if left == 0:
            break
        saved = open_saved(arg)
        if saved is not None:
            require(saved, NEEDS, f"INPUT {arg}", "jaxattn view --global")
            items = saved[:left] if left else saved
            kind = "saved"
        elif is_file_argument(arg):  # corpus.read_inputs' rules, with stores kept lazy
            items, kind = read_input(arg, limit=left), "texts"
        elif not arg.strip():
            raise InputError(None, "an INPUT is empty: give a sentence or a file")
        else:
            items, kind = [split_pair(arg)], "texts"
        if parts and parts[-1][0] == kind == "texts":
            parts[-1][1].extend(items)
        else:
            parts.append((kind, list(items) if kind == "texts" else items))
        total += len(items)
    return parts, total


def _picks(args, cap) -> tuple[list[int], list[int]]:
    """Indices into a saved capture's layers and heads for --layers/--heads (all: None)."""
    from jaxattn.spec import resolve_indices

    out = []
    for flag, have, key in (
        ("layers", cap.layers, "num_layers"),
        ("heads", cap.heads, "num_heads"),
    ):
        value = getattr(args, flag)
        if value is None:
            out.append(list(range(len(have))))
            continue
        count = int((cap.provenance.get("config") or {}).get(key) or max(have) + 1)
        chosen = resolve_indices(value, count, flag)
        missing = [i for i in chosen if i not in have]
        if missing:
            raise UsageError(f"--{flag} {','.join(map(str, missing))} was not captured in the "
                             f"saved input (have {list(have)}): choose among those")  # fmt: skip
        out.append([list(have).index(i) for i in chosen])
    return out[0], out[1]


def _examples(args, parts) -> Iterator[tuple]:
    """(tokens, layers, heads, queries, keys, attention or None, model) of every example."""
    from jaxattn.cli.corpus import report
    from jaxattn.cli.saved import require
    from jaxattn.cli.source import open_source

    for kind, items in parts:
        if kind == "texts":
            with open_source(args) as source:
                stream = source.capture_iter(
                    items, WHAT, args.layers, args.heads, "float32", too_long=args.too_long,
                    precision=getattr(args, "precision", None), window=WINDOW,
                )  # fmt: skip
                for cap in stream:
                    yield (cap.tokens, cap.layers, cap.heads, cap.queries, cap.keys,
                           cap.attention, cap.provenance.get("model", ""))  # fmt: skip
            report(stream, "jaxattn view --global")
            continue
        for cap in items:
            require([cap], NEEDS, "a saved capture", "jaxattn view --global")
            li, hi = _picks(args, cap)
            sel = np.ix_(li, hi)
            att = cap.attention[sel] if "attention" in cap.tensors else None
            layers, heads = [cap.layers[i] for i in li], [cap.heads[i] for i in hi]
            model = cap.provenance.get("model", "")
            yield cap.tokens, layers, heads, cap.queries[sel], cap.keys[sel], att, model


def _gather(records) -> tuple[np.ndarray, np.ndarray]:
    """The kept sentences' queries and keys as two [L, H, n, K] arrays, each sentence's
    own arrays released once copied (peak: the sample once, plus one sentence)."""
    n = sum(len(r.tokens) for r in records)
    L, H, _, K = records[0].queries.shape
    q, k = np.empty((L, H, n, K), np.float32), np.empty((L, H, n, K), np.float32)
    at = 0
    for r in records:
        t = len(r.tokens)
        q[:, :, at : at + t], k[:, :, at : at + t] = r.queries, r.keys
        r.queries = r.keys = None
        at += t
    return q, k


def run(args) -> int:
    """Write the global map of the corpus `args.inputs` to `args.out` (HTML)."""
    from jaxattn.engine.qk_map import MomentStream, fit_map, normalised_cloud, project
    from jaxattn.engine.qk_reduce import check_reducer, reduce
    from jaxattn.views.qk_map import SentenceSample, pack_global, sampled_sentence
    from jaxattn.views.qk_page import write_global_html

    if not args.inputs:
        raise UsageError("--global needs a CORPUS: give input files, texts or a store")
    if args.format not in (None, "html"):
        raise UsageError(f"--global writes one HTML page: drop --format {args.format}")
    check_output(args.out, args.overwrite)
    check_reducer(args.global_reducer)  # before any capture
    t0 = time.perf_counter()
    parts, total = _sources(args)
    if not total:
        raise InputError(None, f"no example to map in {' '.join(args.inputs)}")
    bar = Progress(total, "jaxattn view --global", enabled=not args.global_quiet)
    moments = MomentStream()
    sample = SentenceSample(total, args.global_max_tokens, args.global_seed)
    shape, model = None, ""
    for i, (tokens, layers, heads, qi, ki, att, name) in enumerate(_examples(args, parts)):
        if shape is None:
            shape, model = (list(layers), list(heads)), name
        elif shape != (list(layers), list(heads)):
            raise InputError(None, f"example {i} holds layers {list(layers)} x heads "
                             f"{list(heads)}, the first {shape[0]} x {shape[1]}: give inputs "
                             "of one model and selection")  # fmt: skip
        moments.add(qi, ki)
        bar.update(1, tokens=len(tokens))
        sample.offer(i, len(tokens), lambda: sampled_sentence(i, tokens, qi, ki, att))  # noqa: B023
    bar.close()
    if shape is None:
        raise InputError(None, "every text was skipped (--too-long skip): nothing to map")
    maps = fit_map(moments.moments())
    records = sample.records()
    if not records:
        raise UsageError(f"no sentence fits in --global-max-tokens {args.global_max_tokens}: "
                         "raise it")  # fmt: skip
    q, k = _gather(records)
    xq, xk = project(maps, q, k)
    layouts = {"pca": (xq, xk)}
    if args.global_reducer != "pca":
        L, H, n, _ = q.shape
        lq, lk = np.empty_like(xq), np.empty_like(xk)
        for g in range(L * H):
            a, b = divmod(g, H)
            cloud = normalised_cloud(maps, g, q[a, b], k[a, b])
            init = np.concatenate([xq[a, b], xk[a, b]])
            if not args.global_quiet:
                print(f"{args.global_reducer}: layer {shape[0][a]} head {shape[1][b]} "
                      f"({g + 1}/{L * H}, {2 * n} points)", file=sys.stderr)  # fmt: skip
            out = reduce(args.global_reducer, cloud, init, args.global_seed)
            lq[a, b], lk[a, b] = out[:n], out[n:]
        layouts[args.global_reducer] = (lq, lk)
    del q, k
    header, sections = pack_global(
        records, layouts, layers=shape[0], heads=shape[1], explained=maps.explained,
        sampled=sample.summary(), model=model,
        attention_bytes=int(args.global_attention_mb * (1 << 20)),
    )  # fmt: skip
    title = args.title if args.title != "jaxattn views" else "jaxattn: global query-key map"
    size = write_global_html(ensure_parent(args.out), header, sections, title=title)
    s = sample.summary()
    print(f"wrote {args.out} (global map: {len(shape[0])} layers x {len(shape[1])} heads, "
          f"{s['tokens']} of {s['of_tokens']} tokens, {s['sentences']} of {s['of_sentences']} "
          f"sentences; {size / 1e6:.1f} MB; {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    return 0
