"""The live viewer: a page where a person types a sentence or a pair and sees its views.

    server, port = create_web_server(engine, ("127.0.0.1", 8000))
    server.serve_forever()

Standard library only (`http.server.ThreadingHTTPServer`). Routes:
- ``GET /``: the page (the view scripts inlined; its CSP lets it call only its own origin);
- ``POST /api/view`` with JSON ``{"text": A, "text_b": B or null, "views": [...]}``:
  the `jaxattn.views.payload` document of that example, or ``{"error": message}``
  with status 400 (bad input: empty, too long, unknown view), 413 (body over
  `max_body`), 502 (the gRPC server behind it failed: unreachable...) or 500 (the
  engine failed: out of memory...; `failure_status`);
- the same with ``"along": true``, for a long document (up to `max_document_chars`
  characters and the model's token limit): the stats-first page's data
  (`jaxattn.views.segments_page.segments_data`: per-head sink, previous-token share
  and entropy along the text, from per-row statistics captured blockwise, never a
  map), which segments.js draws.
`engine` is a `jaxattn.CaptureSource`: an `Engine` or an `AttentionClient`
(captures then go through the gRPC server).
Captures run one at a time (a lock): the engine is shared by every request.

Another web site cannot use it through a visitor's browser: on a loopback address
a request whose ``Host`` is no loopback name (DNS rebinding; any port, an SSH
tunnel's) is refused (421), and a POST from another ``Origin`` than the page's own
(403: a browser names the origin of every cross-origin POST, a form's or a
fetch's; scripts such as curl send none and are served).
"""

from __future__ import annotations

import html
import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jaxattn.errors import JaxattnError, ServerError, TooLongError, UsageError, in_terms
from jaxattn.inputs import split_pair
from jaxattn.views.page import CSP_WEB, SCRIPTS, document
from jaxattn.views.payload import VIEWS, build_payload, check_views, needs
from jaxattn.views.segments_page import segments_data, statistics_captures

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

log = logging.getLogger("jaxattn.web")


class BadInput(UsageError):
    """A request the person can fix: shown on the page as it is (status 400, as every
    ValueError and JaxattnError a capture raises)."""


def parse_request(body: dict, max_chars: int, max_document_chars: int | None = None):
    """(text or (A, B), views, along) of an /api/view request; BadInput names what is
    wrong. `along`: the statistics along the text (a long document, up to
    `max_document_chars` characters) instead of the views (`max_chars`)."""
    if not isinstance(body, dict):
        raise BadInput("the request must be a JSON object")
    along = body.get("along", False)
    if not isinstance(along, bool):
        raise BadInput("'along' must be true or false")
    if along:
        max_chars = max_document_chars or max_chars
    text, text_b = body.get("text"), body.get("text_b")
    if not isinstance(text, str) or (text_b is not None and not isinstance(text_b, str)):
        raise BadInput("'text' must be a string and 'text_b' a string or null")
    if text_b is None:  # one box: 'A ||| B' makes a pair, as in every input
        try:
            split = split_pair(text.strip())
        except ValueError as e:
            raise BadInput(f"The text has {e}.") from None
        text, text_b = split if isinstance(split, tuple) else (split, None)
    text = text.strip()
    if not text:
        raise BadInput("Type a sentence first: the text is empty.")
    if text_b is not None:
        text_b = text_b.strip()
        if not text_b:
            raise BadInput("Sentence B of the pair is empty: type it, or untick 'pair'.")
    for name, t in (("the sentence", text), ("sentence B", text_b or "")):
        if len(t) > max_chars:
            more = (
                ""
                if along or not max_document_chars
                else (" (tick 'long document' for the statistics along a longer text)")
            )
            raise BadInput(f"{name} has {len(t)} characters; the limit is {max_chars}{more}.")
    views = body.get("views") or list(VIEWS)
    if not isinstance(views, list) or not all(isinstance(v, str) for v in views):
        raise BadInput("'views' must be a list of view names")
    try:
        views = check_views(views)
    except ValueError as e:
        raise BadInput(str(e)) from None
    return (text if text_b is None else (text, text_b)), views, along


# gRPC status codes of a server's refusal of the request itself (the person can fix it)
REFUSALS = ("INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION")


def failure_status(error: Exception) -> int:
    """The HTTP status of a capture's `error`: 400 for a refusal of the input (a
    ValueError: BadInput, InputError, TooLongError; a server's INVALID_ARGUMENT...),
    502 for a gRPC server that failed otherwise (unreachable, its own error), 500 for
    the engine's (out of device memory...): not the person's text."""
    if isinstance(error, ValueError):
        return 400
    if isinstance(error, ServerError):
        code = getattr(getattr(error, "code", None), "name", None)
        return 400 if code in REFUSALS else 502
    return 500


def capture_along(engine, text) -> list:
    """The captures of one text the stats-first page needs: its per-row statistics
    (every layer and head, blockwise on a long text), no map."""
    causal = bool(engine.model_info().causal)
    return [engine.capture([text], what=what)[0] for what in statistics_captures(causal)]


def host_names(host: str) -> frozenset[str] | None:
    """The names (lower case, without the port) a server bound to `host` answers in a
    request's ``Host``, or None for any: a loopback server answers its loopback names
    only (a name of another site resolving to 127.0.0.1 is DNS rebinding), on any port
    (an SSH tunnel's ``localhost:9000``); one bound to a wildcard or another address is
    meant for others, under names it cannot know."""
    loopback = host == "localhost" or host.startswith("127.") or host == "::1"
    return frozenset({*LOOPBACK_NAMES, host.lower()}) if loopback else None


def host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port: "[::1]:8000" -> "[::1]"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0]


def page(model: str, max_chars: int, max_document_chars: int) -> str:
    """The viewer's HTML page. Its boxes have no maxlength: a browser cuts a longer
    pasted text there without a word; the server names the limit instead. The text
    is a textarea (Enter submits, Shift+Enter a new line): a one-line input turns the
    line breaks of a pasted document into spaces (a decoder's newline tokens lost)."""
    boxes = "".join(
        f'<label><input type="checkbox" name="view" value="{v}" checked> {v}</label> '
        for v in VIEWS
    )
    body = f"""<h1 style="font:600 16px system-ui;margin:0 0 6px">jaxattn live viewer
<span style="font-weight:400;color:#666">· {html.escape(model)}</span></h1>
<form id="web-form" class="jx web-form" autocomplete="off">
<div><textarea id="text-a" name="text" cols="70" rows="2"
 placeholder="A sentence (up to {max_chars:,} characters), or 'sentence A ||| sentence B'"
>I went to the store.</textarea></div>
<div><label><input type="checkbox" id="pair"> pair: sentence B</label>
<input id="text-b" name="text_b" size="56" disabled
 value="At the store, I bought fresh strawberries."></div>
<div><label title="Statistics along the text (sink, previous token, entropy per segment
 for every head), no maps: for documents up to {max_document_chars:,} characters and the
 model's token limit"><input type="checkbox" id="along"> long document: statistics along
 the text</label></div>
<div>{boxes}<button id="go" type="submit">Show</button> <span id="web-status"></span></div>
</form>
<div id="web-error" class="jx jx-error" role="alert" hidden></div>
<div id="jaxattn"></div>"""
    return document(body, title="jaxattn live viewer", scripts=(*SCRIPTS, "web.js"), csp=CSP_WEB)


def create_web_server(
    engine,
    address: tuple[str, int] = ("127.0.0.1", 0),
    *,
    model: str = "",
    max_body: int = 4 << 20,
    max_chars: int = 2000,
    max_document_chars: int = 200_000,
    idle_timeout: float = 60.0,
) -> tuple[ThreadingHTTPServer, int]:
    """An HTTP server for the live viewer, bound but not yet serving.

    Args:
      engine: a `jaxattn.CaptureSource` (Engine, AttentionClient).
      address: (host, port); port 0 picks a free one. Keep 127.0.0.1 unless the
        page is meant for others: it captures whatever anyone sends it. On a
        loopback address it answers only ``Host: localhost``, ``127.0.0.1`` or
        ``[::1]`` (DNS rebinding; any port: an SSH tunnel's), and no POST from
        another web site's origin.
      model: the model's name, shown on the page.
      max_body: largest request body in bytes (413 above).
      max_chars: longest sentence in characters (the model's token limit applies too).
      max_document_chars: longest document for the statistics along the text
        (``"along": true``), in characters; the model's token limit applies too.
      idle_timeout: seconds a connection may send nothing (between requests, or in
        the middle of one: 408) before it is closed, so that a client that stalls
        does not hold a thread and a socket for ever.

    Returns:
      (server, port): call ``server.serve_forever()``; ``server.shutdown()`` stops it.
    """
    lock = threading.Lock()
    html_page = page(model, max_chars, max_document_chars).encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        server_version = "jaxattn-web"
        timeout = idle_timeout  # the socket's: a stalled client is dropped

        def log_message(self, fmt, *args):  # to logging, not stderr
            log.info("%s %s", self.address_string(), fmt % args)

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the page went away meanwhile
                log.info("client %s left before the answer", self.address_string())

        def _json(self, status: int, obj) -> None:
            self._send(status, json.dumps(obj).encode("utf-8"), "application/json")

        def _foreign(self, post: bool) -> bool:
            """Answer a request another site makes through a browser (the module
            docstring) with its refusal; True if refused."""
            host = (self.headers.get("Host") or "").strip().lower()
            if hosts is not None and host_name(host) not in hosts:
                self.close_connection = True
                self._json(421, {"error": f"this server answers localhost, not {host!r}"})
                return True
            if not post:
                return False
            origin = self.headers.get("Origin")
            if origin is not None and origin.lower() != f"http://{host}":
                self.close_connection = True
                self._json(403, {"error": f"requests from {origin} are refused"})
                return True
            return False

        def do_GET(self):
            if self._foreign(post=False):
                return
            if self.path.split("?")[0] in ("/", "/index.html"):
                self._send(200, html_page, "text/html; charset=utf-8")
            else:
                self._json(404, {"error": f"no page {self.path}"})

        def do_POST(self):
            if self._foreign(post=True):
                return
            if self.path != "/api/view":
                return self._json(404, {"error": f"no endpoint {self.path}"})
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._json(411, {"error": "a Content-Length header is required"})
            if length > max_body or length < 0:
                self.close_connection = True  # the unread body must not be parsed as a request
                return self._json(413, {"error": f"request over {max_body} bytes"})
            try:
                body = json.loads(self.rfile.read(length))
            except TimeoutError:  # the body stopped coming
                self.close_connection = True
                return self._json(408, {"error": f"no request body for {idle_timeout:g} s"})
            except UnicodeDecodeError as e:  # Latin-1 from a hand-made client...
                return self._json(400, {"error": f"the request body is not UTF-8 ({e.reason})"})
            except (ValueError, RecursionError):  # not JSON, or nested too deep
                return self._json(400, {"error": "the request body is not JSON"})
            try:
                text, views, along = parse_request(body, max_chars, max_document_chars)
                with lock:  # the engine's work only; the page is built after
                    if along:
                        caps = capture_along(engine, text)
                    else:
                        caps = engine.capture([text], what=needs(views))
                doc = segments_data(caps) if along else build_payload(caps[0], views=views)
            except TooLongError as e:
                error = f"The text is {e.length} tokens long, over the model's limit of {e.limit}"
                return self._json(400, {"error": f"{error}: {e.advice.page}."})
            except (ValueError, JaxattnError) as e:  # BadInput, the engine's or server's
                # refusal (a server's over the token limit...), its advice in the page's terms
                status = failure_status(e)
                if status >= 500:
                    log.error("capture failed: %s", e)
                return self._json(status, {"error": in_terms(str(e), "page", "python")})
            except Exception as e:  # noqa: BLE001 - a failure the page should still explain
                log.exception("capture failed")
                return self._json(
                    HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"capture failed: {e}"}
                )
            self._json(200, doc)

    server = ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    hosts = host_names(address[0])
    return server, server.server_address[1]
