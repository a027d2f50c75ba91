"""`jaxattn capture TEXT [TEXT_B]`: capture one example, locally or from a server."""

from __future__ import annotations

import argparse

from jaxattn.cli.serve_cmd import read_token


def _names(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def _ints(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(",") if v)
    except ValueError:
        msg = f"expected comma-separated integers, got {value!r}"
        raise argparse.ArgumentTypeError(msg) from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "capture",
        help="capture one sentence or sentence pair",
        description="Capture attention quantities of TEXT (or the pair TEXT, TEXT_B) with a "
        "local engine, or from a running server with --server; print a summary and "
        "optionally save the capture (load it with jaxattn.Capture.load).",
    )
    p.add_argument("text", metavar="TEXT")
    p.add_argument("text_b", metavar="TEXT_B", nargs="?", help="sentence B of a pair")
    p.add_argument("--server", metavar="HOST:PORT",
                   help="capture through this server (comma-separated: round-robin)")  # fmt: skip
    p.add_argument("--model", metavar="PATH",
                   help="local checkpoint when no --server (default: embedded model)")  # fmt: skip
    p.add_argument("--what", type=_names, default=("attention",),
                   help="comma-separated quantities (default attention)")  # fmt: skip
    p.add_argument("--layers", type=_ints, help="comma-separated layer indices (default all)")
    p.add_argument("--heads", type=_ints, help="comma-separated head indices (default all)")
    p.add_argument("--dtype", default="float32",
                   choices=("float32", "float16", "bfloat16", "uint8"))  # fmt: skip
    p.add_argument("--codec", default="zstd", choices=("none", "zstd", "lz4"),
                   help="wire compression with --server (default zstd)")  # fmt: skip
    p.add_argument("--truncate", action="store_true", help="cut texts over the model's limit")
    p.add_argument("--out", metavar="FILE", help="save the capture to FILE (.npz)")
    p.add_argument("--token-file", metavar="FILE",
                   help="bearer token for --server (or $JAXATTN_TOKEN)")  # fmt: skip
    p.add_argument("--tls-ca", metavar="PEM", help="connect with TLS trusting this CA")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds (with --server)")
    p.set_defaults(func=_run)


def _capture(args):
    text = args.text if args.text_b is None else (args.text, args.text_b)
    kw = dict(what=args.what, layers=args.layers, heads=args.heads, dtype=args.dtype,
              truncate=args.truncate)  # fmt: skip
    if args.server:
        from jaxattn.client import AttentionClient, AttentionServiceError

        addresses = args.server.split(",")
        try:
            client = AttentionClient(
                addresses,
                token=read_token(args.token_file),
                root_certificates=args.tls_ca,
                timeout=args.timeout,
            )
            with client:
                return client.capture([text], codec=args.codec, **kw)[0]
        except AttentionServiceError as e:
            raise ValueError(f"the server at {args.server} answered {e}") from None
    import jaxattn

    return jaxattn.load(args.model).capture([text], **kw)[0]


def _run(args) -> int:
    cap = _capture(args)
    print(" ".join(cap.tokens))
    if cap.sentence_b_start is not None:
        print(f"sentence B starts at token {cap.sentence_b_start}")
    print(f"layers {list(cap.layers)}  heads {list(cap.heads)}  dtype {cap.dtype}")
    for name, array in cap.tensors.items():
        print(f"  {name:18s} {list(array.shape)} {array.dtype} ({array.nbytes} bytes)")
    if args.out:
        cap.save(args.out)
        print(f"saved to {args.out}")
    return 0
