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
