"""`jaxattn view --global CORPUS... --out qk.html`: the joint query-key map of every head.

CORPUS is what `jaxattn view` reads (texts, input files, capture files, stores of
`jaxattn dump`; --limit counts examples over all of them). One pass over the
corpus: texts are captured window by window (queries, keys and attention, under
--layers/--heads/--precision/--too-long), saved captures read lazily; each
example's per-head moments are summed on the device (`jaxattn.engine.qk_map`)
and a seeded uniform sample of whole sentences (`--global-max-tokens`) is kept
for the page, with its attention deflated up to `--global-attention-mb`. Per
head: queries scaled by c, keys by 1/c and moved onto the queries' (scaled)
centroid, c giving both clouds equal RMS norms; PCA to 2-D (always), and
optionally t-SNE/UMAP (`--global-reducer`). A store is read for queries, keys
and attention only. INPUTs must come from one model (their provenance), saved
captures are shown as stored (no --model/--server). See docs/global-view.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator

import numpy as np

from jaxattn.cli.args import check_output, engine_flags, ensure_parent, positive, positive_float
from jaxattn.cli.saved import check_one_model
from jaxattn.errors import InputError, UsageError
from jaxattn.progress import Progress, counted

NEEDS = ("queries", "keys")
WHAT = ("attention", "queries", "keys")
WINDOW = 64  # texts captured per window


def add_arguments(parser) -> None:
    """Add this mode's own options to the view parser."""
    from jaxattn.engine.qk_reduce import REDUCERS
    from jaxattn.views.qk_payload import ATTENTION_BYTES, MAX_TOKENS

    g = parser.add_argument_group("--global: the joint query-key map (docs/global-view.md)")
    g.add_argument(
        "--global-reducer",
        choices=tuple(REDUCERS),
        default="pca",
        help="the large map's layout: PCA (always made; the thumbnails are PCA), or "
        "per selected head from the PCA start t-SNE (openTSNE: pip install "
        "'jaxattn[layout]') or UMAP (pip install umap-learn); t-SNE takes ~1.5 min "
        "per head of 20,000 points on 2 CPU cores (the default budget gives 40,000): "
        "pick heads with --layers/--heads",
    )
    g.add_argument(
        "--global-max-tokens",
        type=positive,
        default=MAX_TOKENS,
        metavar="N",
        help="tokens kept for the page (2 points each: query and key); a larger "
        "corpus is sampled by whole sentences, uniformly; the page says so",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the sentence sample (default 0)",
    )
    g.add_argument(
        "--global-attention-mb",
        type=positive_float,
        metavar="MIB",
        default=ATTENTION_BYTES / (1 << 20),
        help="most MiB of compressed attention held and embedded for the "
        "click-through head view (sampled sentences beyond it have none)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress line on stderr")


@dataclasses.dataclass
class _Part:
    """Consecutive examples of the corpus read one way.

    Attributes:
      kind: "texts" (captured here) or "saved" (captures as stored).
      items: the texts, or the captures (a lazy store selection or a list).
      origins: per item, (INPUT number, its example index in that INPUT: a store's record).
      where: the part's first INPUT, in words.
      provenance: the model saved captures record (texts: filled in from the source).
    """

    kind: str
    items: list
    origins: list
    where: str
    provenance: dict = dataclasses.field(default_factory=dict)


def _sources(args) -> tuple[list[_Part], int, list[str]]:
    """The corpus's parts in INPUT order, its number of examples (at most --limit) and
    the INPUTs' names for the page. A store is read for the map's quantities only."""
    from jaxattn.cli.corpus import records, text_argument
    from jaxattn.cli.saved import open_saved, require
    from jaxattn.inputs import is_file_argument

    parts, total, limit, names = [], 0, args.limit, []
    for no, arg in enumerate(args.inputs):
        left = limit - total if limit else None
        if left == 0:
            break
        saved = open_saved(arg)
        names.append(arg if saved is not None or is_file_argument(arg) else f"INPUT {no + 1}")
        where = f"INPUT {arg}" if names[-1] == arg else f"INPUT {no + 1} (a text)"
        if saved is not None:
            require(saved, NEEDS, where, "jaxattn view --global", also=("attention",))
            if hasattr(saved, "select"):  # a store: read only these quantities
                prov = dict(saved.provenance)
                saved = saved.select([q for q in WHAT if q in saved.what])
            else:
                prov = dict(saved[0].provenance) if len(saved) else {}
            items = saved[:left] if left else saved
            entries = getattr(items, "entries", None)
            rec = [e.record for e in entries] if entries is not None else range(len(items))
            parts.append(_Part("saved", items, [(no, r) for r in rec], where, prov))
        else:
            if is_file_argument(arg):
                got = [(r.index, r.text) for r in records(arg, limit=left)]
            else:
                got = [(0, text_argument(arg))]
            if not (parts and parts[-1].kind == "texts"):
                parts.append(_Part("texts", [], [], where))
            parts[-1].items.extend(t for _, t in got)
            parts[-1].origins.extend((no, r) for r, _ in got)
            items = got
        total += len(items)
    return parts, total, names


def _check_flags(args, parts) -> None:
    """UsageError for what --global cannot honour (the page is HTML; saved captures are
    shown as stored)."""
    from pathlib import Path

    if not args.inputs:
        raise UsageError("--global needs a CORPUS: give input files, texts or a store")
    if args.format not in (None, "html"):
        raise UsageError(f"--global writes one HTML page: drop --format {args.format}")
    if Path(args.out).suffix.lower() in (".svg", ".png"):
        raise UsageError(f"--global writes one HTML page: give --out a .html name, not {args.out}")
    if args.views is not None:
        raise UsageError(f"--global draws its own page, not the views: drop --views {args.views}")
    if parts and all(p.kind == "saved" for p in parts):
        given = [f"--{flag}" for flag in ("model", "server", "precision") if getattr(args, flag)]
        given += engine_flags(args)
        if given:
            raise UsageError(f"{parts[0].where} holds captures, shown as stored: drop {given[0]}")


def _picks(args, cap) -> tuple[list[int], list[int]]:
    """Indices into a saved capture's layers and heads for --layers/--heads (all: None)."""
    from jaxattn.selection import resolve_indices

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
            raise UsageError(
                f"--{flag} {','.join(map(str, missing))} was not captured in the "
                f"saved input (have {list(have)}): choose among those"
            )
        out.append([list(have).index(i) for i in chosen])
    return out[0], out[1]


def _examples(args, parts, source) -> Iterator[tuple]:
    """(corpus index, origin, tokens, layers, heads, queries, keys, attention or None) of
    every example; texts captured with `source`."""
    from jaxattn.cli.corpus import report
    from jaxattn.cli.saved import require
    from jaxattn.views.payload import query_head_keys  # a grouped model's keys per query head

    at = 0
    for part in parts:
        if part.kind == "texts":
            stream = source.capture_iter(
                part.items,
                what=WHAT,
                layers=args.layers,
                heads=args.heads,
                dtype="float32",
                too_long=args.too_long,
                precision=args.precision,
                window=WINDOW,
            )
            for cap in stream:  # stream.index: the text's place, skipped ones counted
                yield (
                    at + stream.index,
                    part.origins[stream.index],
                    cap.tokens,
                    cap.layers,
                    cap.heads,
                    cap.queries,
                    query_head_keys(cap),
                    cap.attention,
                )
            report(stream, "jaxattn view --global")
        else:
            for j, cap in enumerate(part.items):
                require([cap], NEEDS, "a saved capture", "jaxattn view --global")
                li, hi = _picks(args, cap)
                sel = np.ix_(li, hi)
                att = cap.attention[sel] if "attention" in cap.tensors else None
                layers, heads = [cap.layers[i] for i in li], [cap.heads[i] for i in hi]
                yield (
                    at + j,
                    part.origins[j],
                    cap.tokens,
                    layers,
                    heads,
                    cap.queries[sel],
                    query_head_keys(cap)[sel],
                    att,
                )
        at += len(part.items)


def run(args) -> int:
    """Write the global map of the corpus `args.inputs` to `args.out` (HTML)."""
    from jaxattn.cli.source import open_source
    from jaxattn.engine.qk_reduce import check_reducer

    _check_flags(args, None)
    check_output(args.out, args.overwrite)
    check_reducer(args.global_reducer)  # before any capture
    t0 = time.perf_counter()
    parts, total, names = _sources(args)
    _check_flags(args, parts)
    if not total:
        raise InputError(None, f"no example to map in {' '.join(args.inputs)}")
    with contextlib.ExitStack() as stack:
        source = None
        if any(p.kind == "texts" for p in parts):
            source = stack.enter_context(open_source(args))
            info = source.model_info()
            for p in parts:
                if p.kind == "texts":
                    p.provenance = dict(model=info.name, weights=info.weights)
        check_one_model([(p.where, p.provenance) for p in parts], "map")
        return _run(args, parts, total, names, source, t0)


def _run(args, parts, total: int, names: list[str], source, t0: float) -> int:
    """`run` once the corpus is open and checked."""
    from jaxattn.engine.qk_map import MomentStream, fit_map, project
    from jaxattn.engine.qk_reduce import reduce_heads
    from jaxattn.views.qk_page import write_global_html
    from jaxattn.views.qk_payload import AttentionBudget, SentenceSample, gather, pack_global
    from jaxattn.views.qk_payload import sampled_sentence as sampled

    bar = Progress(total, "jaxattn view --global", enabled=not args.quiet)
    moments = MomentStream()
    budget = AttentionBudget(int(args.global_attention_mb * (1 << 20)))
    sample = SentenceSample(total, args.global_max_tokens, args.seed, budget.release)
    shape = None
    for i, origin, tokens, layers, heads, qi, ki, att in _examples(args, parts, source):
        if shape is None:
            shape = (list(layers), list(heads))
        elif shape != (list(layers), list(heads)):
            raise InputError(
                None,
                f"example {i} holds layers {list(layers)} x heads "
                f"{list(heads)}, the first {shape[0]} x {shape[1]}: give inputs "
                "of one model and selection",
            )
        moments.add(qi, ki)
        bar.update(1, tokens=len(tokens))
        sample.offer(i, len(tokens), lambda: sampled(i, tokens, qi, ki, att, budget, origin))  # noqa: B023
    bar.close()
    if shape is None:
        raise InputError(None, "every text was skipped (--too-long skip): nothing to map")
    maps = fit_map(moments.moments())
    records = sample.records()
    if not records:
        raise UsageError(
            f"no sentence fits in --global-max-tokens {args.global_max_tokens}: raise it"
        )
    q, k = gather(records)
    xq, xk = project(maps, q, k)
    layouts = {"pca": (xq, xk)}
    if args.global_reducer != "pca":
        say = None if args.quiet else lambda m: print(m, file=sys.stderr)
        layouts[args.global_reducer] = reduce_heads(
            args.global_reducer, maps, q, k, (xq, xk), shape, args.seed, say
        )
    del q, k
    header, sections = pack_global(
        records,
        layouts,
        layers=shape[0],
        heads=shape[1],
        explained=maps.explained,
        sampled=sample.summary(),
        model=parts[0].provenance.get("model", ""),
        inputs=names,
    )
    title = args.title if args.title != "jaxattn views" else "jaxattn: global query-key map"
    size = write_global_html(ensure_parent(args.out), header, sections, title=title)
    s = sample.summary()
    print(
        f"wrote {args.out} (global map: {counted(len(shape[0]), 'layer')} x "
        f"{counted(len(shape[1]), 'head')}, "
        f"{s['tokens']} of {s['of_tokens']} tokens, {s['sentences']} of {s['of_sentences']} "
        f"sentences; {size / 1e6:.1f} MB; {time.perf_counter() - t0:.1f} s)"
    )
    return 0
