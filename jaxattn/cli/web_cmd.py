"""`jaxattn web`: the live viewer (type a sentence or a pair, see its views) on 127.0.0.1."""

from __future__ import annotations

from jaxattn.cli.serve_cmd import read_token


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "web",
        help="live viewer: a local web page that captures and shows typed sentences",
        description="Serve a page where you type a sentence or a pair and see its head, "
        "model, neuron and stats views, captured by a local engine (--model) or a gRPC "
        "server (--server). Binds 127.0.0.1 unless --host says otherwise.",
    )
    p.add_argument("--model", metavar="PATH", help="local checkpoint (default: embedded model)")
    p.add_argument("--server", metavar="HOST:PORT", help="capture through this gRPC server")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free)")
    p.add_argument("--max-chars", type=int, default=2000, help="longest sentence accepted")
    p.add_argument("--token-file", metavar="FILE", help="bearer token for --server")
    p.add_argument("--tls-ca", metavar="PEM", help="connect with TLS trusting this CA")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per capture (--server)")
    p.set_defaults(func=_run)


class _Remote:
    """An AttentionClient behind the Engine.capture signature the web server calls."""

    def __init__(self, args):
        from jaxattn.client import AttentionClient

        self.client = AttentionClient(
            args.server.split(","),
            token=read_token(args.token_file),
            root_certificates=args.tls_ca,
            timeout=args.timeout,
        )
        self.name = self.client.model_info().name

    def capture(self, texts, what, **kw):
        from jaxattn.client import AttentionServiceError

        try:
            return self.client.capture(texts, what=what, codec="zstd", **kw)
        except AttentionServiceError as e:
            raise ValueError(f"the server answered {e}") from None


def _run(args) -> int:
    from jaxattn.views.web import create_web_server

    if args.server:
        engine = _Remote(args)
        name = f"{engine.name} via {args.server}"
    else:
        import jaxattn

        engine = jaxattn.load(args.model)
        name = engine.info.name
    server, port = create_web_server(
        engine, (args.host, args.port), model=name, max_chars=args.max_chars
    )
    print(f"jaxattn web: http://{args.host}:{port}/ ({name}); Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
