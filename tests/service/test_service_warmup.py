"""A server warmed for a quantity (`jaxattn serve --warmup`) compiles nothing for its requests."""

from __future__ import annotations

import numpy as np
from compile_events import backend_compiles
from service_support import SENTENCES, running_server

import jaxattn
from jaxattn.client import AttentionClient


def test_requests_run_the_programs_serve_warmed(svc_checkpoint):
    # What `service.serve` does for --warmup attention: the spec of a request for attention
    # with every layer and head, float32 and the server's precision.
    engine = jaxattn.load(svc_checkpoint, buckets=(32,), max_batch=4)
    warmed = engine.warmup(engine.make_spec(what=("attention",)))
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(7)]  # 7 rows: 4 + 2 + 1, or padded
    with running_server(engine) as (_, address), AttentionClient(address, timeout=60) as client:
        with backend_compiles() as compiles:
            got = client.capture(texts, what=["attention"])
        assert compiles == [] and engine.compiled_shapes == warmed
        with backend_compiles() as compiles:  # another spec: compiled on demand
            client.capture(texts[:1], what=["attention"], dtype="uint8")
        assert len(compiles) == 1
    for g, w in zip(got, engine.capture(texts, what="attention"), strict=True):
        np.testing.assert_allclose(g.attention, w.attention, rtol=0, atol=1e-6)
