"""The maps' query rows and key positions through the server and the client.

The captures are the server engine's whole maps sliced in numpy; the output limits
count the selected rows and keys, not T x T (the refusals of bad positions are
rows of the table in test_service_validation.py).
"""

from __future__ import annotations

import grpc
import pytest
from service_support import TEXTS, WHAT

from jaxattn.v1 import attention_pb2 as pb


@pytest.fixture(scope="module")
def whole(svc_engine):
    return svc_engine.capture(TEXTS, what=WHAT)


def test_the_client_gets_each_texts_rows_and_keys_of_the_whole_maps(client, whole):
    import numpy as np

    caps = client.capture(TEXTS, what=WHAT, query_positions="-2:", key_positions=[0, -1])
    again = list(client.capture_iter(TEXTS, what=WHAT, query_positions="-2:", key_positions="0,-1"))
    assert len({c.length for c in caps}) > 2  # negative positions from each one's end
    for got, streamed, want in zip(caps, again, whole, strict=True):
        n = want.length
        rows, keys = [n - 2, n - 1], [0, n - 1]
        assert got.query_positions == streamed.query_positions == tuple(rows)
        assert got.key_positions == streamed.key_positions == tuple(keys)
        for name in WHAT:
            np.testing.assert_array_equal(got.array(name), want.array(name)[:, :, rows][..., keys])
            np.testing.assert_array_equal(streamed.array(name), got.array(name))


def test_uint8_maps_take_their_range_from_the_selected_rows_and_keys(client, whole):
    """The affine uint8 range (alpha_fx_norm) is the min and max of what is kept, so the
    decoded values are the whole float32 map's within half a step."""
    import numpy as np

    caps = client.capture(TEXTS, what=WHAT, dtype="uint8", query_positions=[-1], key_positions=":2")
    for got, want in zip(caps, whole, strict=True):
        kept = want.alpha_fx_norm[:, :, [want.length - 1]][..., [0, 1]]
        scale, offset = got.quantization["alpha_fx_norm"]
        assert offset == pytest.approx(kept.min(), rel=1e-6)
        assert scale == pytest.approx((kept.max() - kept.min()) / 255, rel=1e-5)
        np.testing.assert_allclose(got.alpha_fx_norm, kept, atol=scale / 2 + 1e-7)
        np.testing.assert_allclose(got.attention, want.attention[:, :, -1:, :2], atol=0.5 / 255)


def test_the_output_limit_counts_the_selected_rows_not_the_whole_map(svc_engine):
    from service.requests import RequestError, RequestParser

    # WHAT at the 32-token bucket: 2 x 3 layers x 3 heads x 32 x 32 x 4 bytes = 73,728;
    # the limit bounds a layer group (one layer: 24,576; with 5 rows 3,840)
    parser = RequestParser(svc_engine, max_texts=8, max_tokens=500, max_example_bytes=3_000)
    texts = [pb.Text(text="the cat sat on the mat")]
    with pytest.raises(RequestError) as info:
        parser.parse(pb.CaptureRequest(texts=texts, what=WHAT))
    assert info.value.limit == "max_example_bytes" and "select query rows" in info.value.message
    one_row = parser.parse(pb.CaptureRequest(texts=texts, what=WHAT, query_positions=[-1]))
    assert one_row.spec.query_positions == (-1,)  # 2 x 3 x 3 x 1 x 32 x 4 = 2,304 bytes
    with pytest.raises(RequestError) as info:
        parser.parse(pb.CaptureRequest(texts=texts, what=WHAT, query_positions=[0, 1, 2, 3, 4]))
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "3 layers x 3 heads x 5 query rows, float32" in info.value.message


def test_a_client_refuses_whole_maps_from_a_server_that_ignores_positions(whole):
    from jaxattn.client.errors import AttentionServiceError
    from jaxattn.client.request import check_answer

    request = pb.CaptureRequest(query_positions=[-1])
    with pytest.raises(AttentionServiceError, match="sent whole maps"):
        check_answer(request, whole[0], "old:1")


def test_the_wire_refuses_a_header_whose_positions_do_not_fit_its_maps(whole):
    import dataclasses

    from jaxattn.wire import WireError
    from jaxattn.wire.receive import StreamDecoder
    from jaxattn.wire.send import chunk_example

    cap, n = whole[0], whole[0].length
    rows, keys = (n - 2, n - 1), (0, n - 1)
    tensors = {k: a[:, :, list(rows)][..., list(keys)] for k, a in cap.tensors.items()}
    cut = dataclasses.replace(cap, tensors=tensors, query_positions=rows, key_positions=keys)
    messages = list(chunk_example(0, cut, codec="none", max_chunk_bytes=1 << 20))
    decoder = StreamDecoder()
    (back,) = [c for m in messages if (c := decoder.feed(m)) is not None]
    assert back.query_positions == rows and back.key_positions == keys
    del messages[0].header.query_positions[:]
    messages[0].header.query_positions.extend([n - 3, n - 2, n - 1])  # three named, two sent
    decoder = StreamDecoder()
    refusal = r"has shape \[\d+, \d+, 2, 2\], expected \[\d+, \d+, 3, 2\].*T = query_positions"
    with pytest.raises(WireError, match=refusal):
        for m in messages:
            decoder.feed(m)
