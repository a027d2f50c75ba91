"""A server warmed for a quantity (`jaxattn serve --warmup`) compiles nothing for its requests."""

from __future__ import annotations

import numpy as np
from compile_events import GENERATION, backend_compiles
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


def _serve_until_listening(engine, monkeypatch, *argvs, **stand_ins) -> list:
    """Run `jaxattn serve` with each argv on `engine` (the load stood in for), each stopped
    by a stand-in create_server once warmed; `stand_ins`: the engine's methods replaced
    (warmup, ...). Returns the options each create_server was given."""
    import jaxattn.checkpoints.loading
    import service.main
    from jaxattn.cli import main

    created = []

    class Stop(Exception):
        pass

    def create_server(engine, address, options):
        created.append(options)
        raise Stop

    monkeypatch.setattr(jaxattn.checkpoints.loading, "load", lambda *a, **k: engine)
    for name, stand_in in stand_ins.items():
        monkeypatch.setattr(engine, name, stand_in)
    monkeypatch.setattr(service.main, "create_server", create_server)
    for argv in argvs:
        main(["serve", "--port", "0", *argv])
    return created


def test_serve_warmup_compiles_the_layer_groups_its_limit_makes(svc_engine, monkeypatch):
    # `jaxattn serve --warmup` with a per-example limit one example exceeds: the server
    # runs it in layer groups within the limit (create_server), so warmup is asked for
    # those groups' programs with the same limit (`Engine.warmup(group_bytes=)`).
    warmed = []

    def warmup(spec, sizes="all", stop=None, group_bytes=None):
        warmed.append(group_bytes)
        return 0

    args = ["--warmup", "attention", "--max-example-mib", "0.1"]
    created = _serve_until_listening(svc_engine, monkeypatch, args, warmup=warmup)
    limit = created[0].max_example_bytes
    assert 0 < limit < created[0].max_buffered_bytes and warmed == [limit]


def test_serve_warmup_compiles_a_generations_steps_when_it_generates(svc_gpt2, monkeypatch):
    # A server of a decoder that generates: --warmup also compiles the programs a
    # generation's steps run (`Engine.warmup_generation`), so a first generation compiles
    # no step of its own; --max-new-tokens 0 (or no --warmup) does not.
    warmed = []

    def warmup(spec, sizes="all", stop=None, group_bytes=None):
        warmed.append(spec)
        return 0

    attention = svc_gpt2.make_spec(what=("attention",))
    _serve_until_listening(
        svc_gpt2,
        monkeypatch,
        ["--warmup", "attention"],
        warmup=warmup,
        warmup_generation=lambda sizes, stop: warmed.append(sizes),
    )
    assert warmed == [attention, "all"]
    warmed.clear()
    _serve_until_listening(
        svc_gpt2, monkeypatch, ["--warmup", "attention", "--max-new-tokens", "0"]
    )
    assert warmed == [attention]


def test_a_warmed_generation_leaves_no_step_to_compile(tmp_path):

    from gpt2_fixture import make_gpt2_checkpoint

    # buckets of 16: shapes no other test compiled in this process
    engine = jaxattn.load(make_gpt2_checkpoint(tmp_path), buckets=(16,), max_batch=4)
    made = engine.warmup_generation("largest")  # the largest batch of each cache length
    lengths = engine.kv_decoder.lengths()
    # prefill, step and their writes; a joining prompt's prefill at the smallest size
    # (1), its write, and its row's insertion; into each length but the shortest, a
    # shorter joining prompt's caches widened, and a group's own (4 rows) prefilled at
    # the shorter length holding its prompts (`KVDecoder.prefill_length`)
    assert made == 7 * len(lengths) + 2 * (len(lengths) - 1)
    with backend_compiles(GENERATION) as compiles:  # the generation's own programs
        gens = engine.generate(["a", "the cat sat", "Hello, world."], 20, stop_at_eos=False)
        (one,) = engine.generate(["Hello, world."], 20, stop_at_eos=False)  # pads to 4
    assert [len(g.ids) for g in gens] == [20, 20, 20] and one.ids == gens[2].ids
    assert compiles == []
    # "all": every batch size of the ladder (4, 2, 1) of every length (shapes recorded,
    # not compiled), and a group of one no longer pads
    shapes = []
    engine.kv_decoder._compile = lambda shape: shapes.append(shape) or 0
    engine.warmup_generation("all")
    assert sorted((s.length, s.batch) for s in shapes) == [
        (n, b) for n in lengths for b in (1, 2, 4)
    ]
    assert engine.kv_decoder.shape(1, 16).batch == 1
