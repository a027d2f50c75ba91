"""`jaxattn web`: the live viewer (type a sentence or a pair, see its views) on 127.0.0.1."""

from __future__ import annotations

from jaxattn.cli.args import add_codec_argument, add_source_arguments, port, positive
from jaxattn.cli.source import open_source


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "web",
        help="live viewer: a local web page that captures and shows typed sentences",
        description="Serve a page where you type a sentence or a pair and see its head, "
        "model, neuron and stats views, or paste a long document and see its statistics "
        "along the text, captured by a local engine (--model) or a gRPC "
        "server (--server). Binds 127.0.0.1 unless --host says otherwise.",
    )
    add_source_arguments(p)
    add_codec_argument(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="port (default 8000; 0 = any free)")
    p.add_argument("--max-chars", type=positive, default=2000, help="longest sentence accepted")
    p.add_argument(
        "--max-document-chars",
        type=positive,
        default=200_000,
        help="longest document for the statistics along the text ('long document' on the "
        "page), in characters; the model's token limit applies too (default 200000)",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    import socket

    from jaxattn.netaddr import check_listen
    from jaxattn.views.web import create_web_server

    # Before the model loads: a busy port, a bad host (the web server is IPv4 only).
    check_listen(args.host, args.port, socket.AF_INET)
    with open_source(args) as source:
        name = source.model_info().name
        if args.server:
            name = f"{name} via {args.server}"
        server, port = create_web_server(
            source,
            (args.host, args.port),
            model=name,
            max_chars=args.max_chars,
            max_document_chars=args.max_document_chars,
        )
        print(f"jaxattn web: http://{args.host}:{port}/ ({name}); Ctrl-C stops", flush=True)
        try:
            server.serve_forever()
        finally:
            server.server_close()
    return 0
