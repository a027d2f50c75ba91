"""Client arguments -> one `CaptureRequest`, checked before anything is sent.

The checks and their messages are the engine's (`jaxattn.spec`), so a bad
argument fails the same way against a server as against a local engine, and
never costs a call. Layers and heads take the engine's `Selection` (negative
indices, slices, "0,3,-1"): the wire carries only non-negative indices
(attention.proto), so those are resolved here against the model's counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import grpc

from jaxattn.capture import Capture
from jaxattn.client.errors import AttentionServiceError
from jaxattn.continuations import check_generation
from jaxattn.errors import UsageError
from jaxattn.inputs import Text, check_text
from jaxattn.selection import (
    Selection,
    is_int,
    parse_selection,
    positions_of,
    resolve_indices,
)
from jaxattn.spec import check_maps_asked, check_precision, check_what
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs


def check_codec(codec: str) -> str:
    """`codec` if it is a wire codec (UsageError naming the valid ones otherwise)."""
    if codec not in codecs.CODEC_TO_PB:
        raise UsageError(f"unknown codec {codec!r}: valid are {', '.join(codecs.CODECS)}")
    return codec


# The longest deadline a call may have: gRPC keeps a deadline as nanoseconds since the
# epoch in an int64 (to 2262), so a timeout of about 7e9 s or more (inf included) was an
# immediate DEADLINE_EXCEEDED that seemed to come from the server. 1e9 s: 31 years.
MAX_TIMEOUT_S = 1e9


def check_timeout(timeout) -> None:
    """UsageError (a ValueError) unless `timeout` is a positive number of seconds, at
    most `MAX_TIMEOUT_S`."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= MAX_TIMEOUT_S
    ):
        raise UsageError(
            f"timeout must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, "
            f"got {timeout!r}"
        )


def plain_indices(value: Selection) -> list[int] | None:
    """The selection as a list when it already is what the wire carries (non-negative
    integers; None: all), else None (it needs the model's counts to resolve)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, slice, range)):
        return None
    if is_int(value):
        return [int(value)] if int(value) >= 0 else None
    if not isinstance(value, Iterable):
        return None
    items = list(value)
    if all(is_int(v) and int(v) >= 0 for v in items):
        return [int(v) for v in items]
    return None


def indices(value: Selection, count: Callable[[], int], field: str) -> list[int]:
    """The wire's indices of a layers/heads selection ([] = all).

    Non-negative integer lists go as they are (the server checks the range); a
    negative index, a slice or a "0,3,-1" string is resolved against `count()`
    (the model's layers or heads, which may cost one GetModelInfo call).

    Raises:
      UsageError: naming the field and the valid range.
    """
    if isinstance(value, str):
        value = parse_selection(value)  # a bad string fails before any call
    if isinstance(value, Iterator):
        # a generator (read once) is resolved against the model's count, read no further
        # than its first index out of range: itertools.count() was listed for ever
        return list(resolve_indices(value, count(), field))
    plain = plain_indices(value)
    if plain is not None:
        return plain
    return list(resolve_indices(value, count(), field))


def texts_message(texts: Sequence[Text]) -> list[pb.Text]:
    """The request's Text messages (UsageError naming the first bad entry by index)."""
    if isinstance(texts, (str, bytes)):
        raise UsageError("texts must be a list of strings or (a, b) pairs: wrap it in a list")
    if not isinstance(texts, Sequence):  # as the engine: a generator was read twice, and
        # the second reading, empty, gave capture() no captures at all
        raise UsageError(
            f"texts must be a list, got {type(texts).__name__} (capture_iter reads any iterable)"
        )
    out = []
    for i, t in enumerate(texts):
        t = check_text(t, i)
        out.append(pb.Text(text=t) if isinstance(t, str) else pb.Text(text=t[0], text_pair=t[1]))
    return out


def build(
    texts: Sequence[Text],
    what: str | Iterable[str] | None,
    layers: list[int],
    heads: list[int],
    dtype: str,
    codec: str,
    *,
    too_long: str,
    precision: str | None,
    max_chunk_bytes: int | None,
    query_positions: Selection = None,
    key_positions: Selection = None,
    generate: int | None = None,
    stop_at_eos: bool = True,
    max_positions: int | None = None,
) -> pb.CaptureRequest:
    """The CaptureRequest of checked arguments (layers/heads already resolved).

    query_positions, key_positions: the maps' rows and keys (`jaxattn.selection.positions_of`:
    the wire carries the positions, negative ones as they are; the server resolves
    them against each text), each no more than `position_limit(max_positions)`: the
    model's longest input where the client knows it (None: MAX_POSITIONS), an iterable
    read no further than one past that.
    generate: a decoder's new tokens to generate first (CaptureRequest.generate; None:
    none), ending at EOS unless `stop_at_eos` is False (CaptureRequest.ignore_eos).

    Raises:
      UsageError: an unknown quantity, dtype or precision, statistics as uint8,
        a max_chunk_bytes out of range, a malformed text, positions a slice cannot
        keep at one count, too many of them, or positions for no map, generate < 1
        or not a whole number, stop_at_eos=False without generate. Whether the model computes a
        quantity is the server's check (INVALID_ARGUMENT on what[i]), and so is
        whether each position lies within each text.
    """
    names = check_what(what, dtype)
    rows = positions_of(query_positions, "query_positions", max_positions)
    keys = positions_of(key_positions, "key_positions", max_positions)
    check_maps_asked(names, rows is not None or keys is not None)
    if precision is not None:
        check_precision(precision)
    lo, hi = codecs.MIN_MAX_CHUNK_BYTES, codecs.MAX_MAX_CHUNK_BYTES
    if max_chunk_bytes and not (is_int(max_chunk_bytes) and lo <= max_chunk_bytes <= hi):
        raise UsageError(
            f"max_chunk_bytes {max_chunk_bytes!r} is out of range: valid are None "
            f"(the server's default) or {lo}..{hi}"
        )
    new, stop_at_eos = check_generation(generate, stop_at_eos)
    new = new or 0
    if new > codecs.MAX_UINT32:
        raise UsageError(f"generate {new} is beyond what a request can carry: ask fewer")
    return pb.CaptureRequest(
        texts=texts_message(texts),
        what=[] if what is None else names,  # none: the server's default
        layers=layers,
        heads=heads,
        dtype=codecs.DTYPE_TO_PB[dtype],
        codec=codecs.CODEC_TO_PB[check_codec(codec)],
        max_chunk_bytes=max_chunk_bytes or 0,
        truncate=too_long != "error",  # "skip" too: the client drops what was cut
        precision=codecs.PRECISION_TO_PB[precision] if precision else 0,
        query_positions=rows or (),
        key_positions=keys or (),
        generate=new,
        ignore_eos=bool(new) and not stop_at_eos,
    )


def check_answer(request: pb.CaptureRequest, capture: Capture, address: str) -> None:
    """Refuse a capture computed at another precision than the request asked for, or
    with whole maps where the request selected rows or keys.

    Raises:
      AttentionServiceError: UNIMPLEMENTED (a jaxattn 0.1 server ignores the
        precision field and computes at highest; a server that predates
        query_positions and key_positions ignores them and sends whole maps).
    """
    if request.generate and capture.generated_start is None:
        raise AttentionServiceError(
            grpc.StatusCode.UNIMPLEMENTED,
            "asked to generate, the server sent the texts' captures without a continuation "
            "(a server that predates generate ignores it): upgrade the server, or generate "
            "on a local engine",
            address,
        )
    for field in ("query_positions", "key_positions"):
        if getattr(request, field) and getattr(capture, field) is None:
            raise AttentionServiceError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"asked for {field}, the server sent whole maps (a server that predates "
                f"{field} ignores it): capture without it, or upgrade the server",
                address,
            )
    asked = codecs.PB_TO_PRECISION.get(request.precision)
    if asked is not None and capture.precision != asked:
        raise AttentionServiceError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"asked for precision {asked}, the server computed {capture.precision} "
            "(a server older than jaxattn 0.2 has only highest)",
            address,
        )
