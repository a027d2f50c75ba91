"""`Engine.warmup` and `jaxattn serve --warmup` compile the layer-group programs of the
buckets whose examples run in layer groups (issue 31, review), under the output budget
or the server's per-example limit (`group_bytes`), so the first long request compiles
nothing (counted by JAX's own compile events). A tiny random BERT (3 layers x 3 heads)."""

from __future__ import annotations

import pytest
from compile_events import backend_compiles

import jaxattn

LONG = "the quick brown fox jumps over the lazy dog"  # 11 tokens: bucket 16
ASK = dict(what=("attention", "hidden_states"), layers=[0, 1, 2], heads=[0, 2])


@pytest.mark.parametrize("loop", ["unrolled", "scan"])
def test_warmup_compiles_the_layer_group_programs(bert_checkpoint, loop):
    engine = jaxattn.load(bert_checkpoint, output_budget=2500, buckets=(16, 24), layer_loop=loop)
    spec = engine.make_spec(**ASK)
    tokenized = engine.tokenize([LONG, LONG + " " + LONG])  # 11 and 20 tokens: 16 and 24
    assert engine.pipeline.group_sizes(tokenized, spec) == [1, 1]
    warmed = engine.warmup(spec)
    with backend_compiles() as compiles:
        got = engine.capture([LONG, LONG + " " + LONG], **ASK)
    assert compiles == []  # warmup compiled every group program the calls ran
    assert engine.compiled_shapes == warmed
    assert [g.tensors["attention"].shape for g in got] == [(3, 2, 11, 11), (3, 2, 20, 20)]


def test_warmup_with_group_bytes_compiles_what_a_server_runs(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint, buckets=(16, 24))  # a budget no example exceeds
    spec = engine.make_spec(**ASK)
    limit = engine.output_bytes(spec, 24) - 1  # as a server's max_example_bytes
    sizes = engine.pipeline.group_sizes(engine.tokenize([LONG]), spec, limit)
    assert sizes == [0]  # 16 tokens fit, 24 run in groups
    engine.warmup(spec, group_bytes=limit)
    text = LONG + " " + LONG
    with backend_compiles() as compiles:
        parts = list(engine.run(engine.tokenize([text]), spec, parts=True, group_bytes=limit))
        engine.capture([LONG], **ASK)
    assert len(parts) > 1 and compiles == []
