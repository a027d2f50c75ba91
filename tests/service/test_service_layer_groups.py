"""An example over the per-example limit is served in layer groups (issue 31, "Outputs at
this size"): the engine runs it a group of layers at a time within max_example_bytes,
the server sends each group's byte ranges as it lands and holds about a group, not the
example, and the client reassembles the Capture the in-process engine gives (plain and
coalesced streams). The shared tiny engine (3 layers x 3 heads): attention of a text
padded to 67 is 161,604 bytes, 53,868 a layer; with a 100,000-byte limit it used to be
refused (tests/service/test_service_output_limits.py keeps a limit one layer exceeds)."""

from __future__ import annotations

import numpy as np
import pytest
from service_support import running_server

from jaxattn.client import AttentionClient
from jaxattn.engine.layer_groups import GroupPolicy

LONG = "the cat sat on the mat " * 6  # 38 tokens: padded to 67
SHORT = "the cat sat on the mat"
LIMIT = 100_000
BUFFER = 30_000  # a call's unsent results: less than LONG's 61,104 bytes (38 tokens)


@pytest.mark.parametrize("coalesce", [False, True])
def test_an_example_over_the_limit_streams_in_layer_groups(svc_engine, coalesce):
    what = ["attention", "hidden_states"]
    spec = svc_engine.make_spec(what=what)
    assert svc_engine.output_bytes(spec, 67) > LIMIT  # refused whole, before
    assert svc_engine.part_bytes(spec, 67, LIMIT) < LIMIT  # a layer group fits
    policy = svc_engine.pipeline.group_policy
    svc_engine.pipeline.group_policy = GroupPolicy(0)
    try:
        want = svc_engine.capture([SHORT, LONG, SHORT], what=what)  # one program each
    finally:
        svc_engine.pipeline.group_policy = policy
    options = dict(max_example_bytes=LIMIT, request_buffer_bytes=BUFFER)
    with running_server(svc_engine, **options) as (server, address):
        with AttentionClient(address, timeout=60.0, coalesce=coalesce) as client:
            assert client.server_info().longest_text_attention == 67  # a layer fits
            got = client.capture([SHORT, LONG, SHORT], what=what)
        stats = server.batcher.stats
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.layers == w.layers
        for name in what:
            assert g.tensors[name].shape == w.tensors[name].shape, name
            np.testing.assert_allclose(
                g.tensors[name], w.tensors[name], rtol=2e-5, atol=2e-6, err_msg=name
            )
    # the server held about a group of LONG at a time (a layer's maps and hidden
    # states, 17,328 + 2,280 bytes at 38 tokens), never its whole output
    whole = sum(t.nbytes for t in want[1].tensors.values())
    assert whole == 3 * 3 * 38 * 38 * 4 + 4 * 38 * 15 * 4 > BUFFER
    assert 0 < stats["peak_job_buffered_bytes"] <= BUFFER, stats


def test_a_refusal_says_why_affine_uint8_is_not_grouped_and_advises_what_groups(svc_engine):
    # uint8 scores take one range over every layer: the example runs whole, never in
    # groups, so it is refused at its whole size with the reason; float16 keeps groups
    # (uint8 would not: not advised to a float32 request of scores either).
    from service.limits import OutputLimits

    tokenized = svc_engine.tokenize([LONG])  # 38 tokens, padded to 67
    limits = OutputLimits(svc_engine, max_example_bytes=40_000)
    spec = svc_engine.make_spec(what=["attention", "scores"], dtype="uint8")
    assert svc_engine.part_bytes(spec, 67, 40_000) == svc_engine.output_bytes(spec, 67)
    message, field, limit = limits.check(spec, tokenized)
    assert (field, limit) == ("texts[0]", "max_example_bytes")
    assert "80.8 kB of attention, scores (3 layers x 3 heads, uint8) (not in layer groups: " in (
        message
    )
    assert "uint8 scores takes one range over every layer" in message
    assert message.endswith(" or float16"), message
    float32 = svc_engine.make_spec(what=["scores"], layers=[0, 1])
    message, _, _ = limits.check(float32, tokenized)
    assert "53.9 kB a layer group" in message and message.endswith(" or float16"), message
    attention = svc_engine.make_spec(what=["attention"])  # probabilities: uint8 groups
    assert limits.check(attention, tokenized)[0].endswith(" or uint8")
