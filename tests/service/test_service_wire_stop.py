"""ExampleHeader.stop on its own: every stop reason (`jaxattn.continuations.STOPS`) goes
through send and receive as it was, absent stays None, and a header naming a stop the
client does not know, or a stop without a continuation, is refused naming it."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_service_wire import decode_all, make_capture

from jaxattn.continuations import STOPS
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import StreamDecoder, WireError, chunk_example, serialize_example


def _generated(stop) -> object:
    return dataclasses.replace(make_capture(6, "float32"), generated_start=4, stop=stop)


@pytest.mark.parametrize("stop", [*STOPS, None])
def test_every_stop_goes_through_the_wire_as_it_was(stop):
    cap = _generated(stop)
    messages = list(chunk_example(0, cap, codec="none", max_chunk_bytes=1 << 20))
    assert messages[0].header.HasField("stop") == (stop is not None)
    (back,) = decode_all(messages)
    assert back.stop == stop and back.generated_start == 4
    # the serialised fast path writes the same header
    decoder = StreamDecoder()
    got = [
        c
        for m in serialize_example(0, cap, codec="none", max_chunk_bytes=1 << 20)
        for c in decoder.feed_all(m)
    ]
    assert [c.stop for c in got] == [stop]


def _with_header(**fields) -> list[pb.CaptureResponse]:
    messages = list(chunk_example(0, _generated("eos"), codec="none", max_chunk_bytes=1 << 20))
    header = messages[0].header
    for name, value in fields.items():
        if value is None:
            header.ClearField(name)
        else:
            setattr(header, name, value)
    return messages


@pytest.mark.parametrize("stop", ["stop_sequence", "EOS", ""])
def test_an_unknown_stop_is_refused_naming_it(stop):
    with pytest.raises(
        WireError,
        match=rf"example 0: unknown stop '{stop}'; expected one of eos, max_new_tokens, limit",
    ):
        decode_all(_with_header(stop=stop))


def test_a_stop_without_a_continuation_is_refused():
    with pytest.raises(WireError, match="example 0: stop 'eos' without a generated_start"):
        decode_all(_with_header(generated_start=None))


def test_the_proto_names_every_stop_and_no_other():
    """attention.proto's comment on ExampleHeader.stop lists STOPS (the one list)."""
    from jaxattn.v1 import PROTO

    text = PROTO.read_text()
    header = text[text.index("message ExampleHeader") :]
    comment = header[: header.index("optional string stop = 15;")].rsplit(";", 1)[1]
    assert list(dict.fromkeys(re.findall(r'"(\w+)"', comment))) == list(STOPS)
