"""`jaxattn demo`: the README's first quick-start command, end to end.

Starts a server on the embedded model (a free loopback port), captures the two
example sentences through the Python client (sentence A alone, then the pair; a
decoder's --model: the two as one text), prints a per-layer summary and stops the
server.
"""

from __future__ import annotations

import time

import numpy as np

from jaxattn.cli.args import (
    add_codec_argument,
    add_dtype_argument,
    add_source_arguments,
    engine_options,
)

SENTENCE_A = "I went to the store."
SENTENCE_B = "At the store, I bought fresh strawberries."
WHAT = ("attention", "alpha_fx_norm")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="serve the embedded model, capture the example sentences, summarise",
        description="Start a server on the embedded all-MiniLM-L6-v2 (or --model) on a free "
        "127.0.0.1 port, capture 'I went to the store.' alone and paired with 'At the "
        "store, I bought fresh strawberries.' through the gRPC client, print a per-layer "
        "summary, stop the server.",
    )
    add_source_arguments(p, server=False)
    add_dtype_argument(p)
    add_codec_argument(p, used="between the demo's server and client")
    p.set_defaults(func=_run)


def layer_summary(cap) -> list[dict]:
    """Per captured layer: attention entropy, mass on [CLS]/[SEP], mean ||alpha f(x)||.

    Entropy is -sum_j a_ij ln a_ij (nats), averaged over heads and query
    positions i; mass on a token class is sum_j over its positions of a_ij,
    averaged likewise; [CLS] is position 0, [SEP] the positions holding the
    final token's string. The norm columns use ||alpha^h_ij f_h(x_j)||
    (Kobayashi et al. 2020): its mean over heads, i, j, and the shares of each
    query's total that go to [CLS] and to [SEP] (compare with the weights' shares).
    """
    att = cap.attention  # [L, H, T, S]
    norm = cap.alpha_fx_norm  # [L, H, T, S]
    sep = np.array([t == cap.tokens[-1] for t in cap.tokens])
    rows = []
    for k, layer in enumerate(cap.layers):
        a = att[k].astype(np.float64)
        entropy = -(a * np.log(np.where(a > 0, a, 1.0))).sum(-1).mean()
        n = norm[k].astype(np.float64)
        rows.append(
            dict(
                layer=layer,
                entropy=float(entropy),
                cls=float(a[..., 0].mean()),
                sep=float(a[..., sep].sum(-1).mean()),
                norm=float(n.mean()),
                norm_cls=float((n[..., 0] / n.sum(-1)).mean()),
                norm_sep=float((n[..., sep].sum(-1) / n.sum(-1)).mean()),
            )
        )
    return rows


def _print(title: str, cap, first: str = "[CLS]", last: str = "[SEP]") -> None:
    print(f"\n{title}")
    print("  " + " ".join(cap.tokens))
    print(
        f"  {'layer':>5} {'entropy':>8} {'a->' + first:>9} {'a->' + last:>9} "
        f"{'mean|af(x)|':>12} {'|af|->' + first:>12} {'|af|->' + last:>12}"
    )
    for r in layer_summary(cap):
        print(
            f"  {r['layer']:>5} {r['entropy']:>8.3f} {r['cls']:>9.3f} {r['sep']:>9.3f} "
            f"{r['norm']:>12.4f} {r['norm_cls']:>12.3f} {r['norm_sep']:>12.3f}"
        )


def _run(args) -> int:
    import jaxattn
    from jaxattn.cli.serve_cmd import start_server
    from jaxattn.client import AttentionClient

    t0 = time.perf_counter()
    engine = jaxattn.load(args.model, **engine_options(args))
    server, port = start_server(engine, "127.0.0.1:0", grace_s=5.0)
    address = f"127.0.0.1:{port}"
    try:
        with AttentionClient(address, timeout=300.0) as client:
            info = client.model_info()
            print(
                f"server on {address}: {info.name} ({info.family}, {info.layers} layers x "
                f"{info.heads} heads, D={info.hidden}), ready in "
                f"{time.perf_counter() - t0:.1f}s"
            )
            t1 = time.perf_counter()
            # a decoder reads single texts: the pair as one text, no [CLS]/[SEP]
            joined = f"{SENTENCE_A} {SENTENCE_B}"
            single, pair = client.capture(
                [SENTENCE_A, joined if info.causal else (SENTENCE_A, SENTENCE_B)],
                what=WHAT,
                dtype=args.dtype,
                codec=args.codec,
            )
            print(
                f"captured {', '.join(WHAT)} ({args.dtype}, {args.codec}) of 2 examples "
                f"through the client in {time.perf_counter() - t1:.2f}s"
            )
    finally:
        server.stop(grace=5.0).wait()
    if info.causal:
        _print(f"A: {SENTENCE_A!r}", single, "first", "last")
        _print(f"A B as one text (a decoder reads no pairs): {joined!r}", pair, "first", "last")
        names = "first = the first token, last = the tokens equal to the last one; "
    else:
        _print(f"A: {SENTENCE_A!r}", single)
        _print(
            f"A+B: {SENTENCE_A!r} / {SENTENCE_B!r} (B starts at token {pair.sentence_b_start})",
            pair,
        )
        names = ""
    print(
        f"\n{names}entropy in nats, averaged over heads and query positions; a = attention "
        "weight, |af(x)| = ||alpha f(x)|| (Kobayashi et al. 2020),\n|af|->X = share of each "
        "query's ||alpha f(x)|| total that goes to X. server stopped."
    )
    return 0
