"""Decoder captures (a tiny GPT-2, a tiny grouped-query Llama) through every path: the
gRPC server and Python client, a store written by `jaxattn dump` and read back, and the
Capture file; and the key/value-head selection of a grouped-query model, exact against
the full capture sliced by hand.

One module fixture builds both checkpoints and engines; every path reuses the same
specs (a few compiles in all: they are the cost on the 2-core machine).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from llama_fixture import LLAMA_CONFIG, make_llama_checkpoint  # noqa: E402

TEXTS = ["I went to the store.", "At the store, I bought fresh strawberries."]
WHAT = ("attention", "scores", "queries", "keys", "values", "fx_norm", "hidden_states")
# Llama's 4 query heads read key/value heads h // 2: heads 2 and 3 read head 1.
HEADS = (2, 3)
KV_HEADS = (1, 1)


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    """name -> (checkpoint dir, engine, full capture of TEXTS) for gpt2 and llama."""
    import jaxattn

    root = tmp_path_factory.mktemp("decoders")
    out = {}
    for name, make in (("gpt2", make_gpt2_checkpoint), ("llama", make_llama_checkpoint)):
        path = make(root / name)
        engine = jaxattn.load(path, buckets=(16,), max_batch=2)
        out[name] = (path, engine, engine.capture(TEXTS, what=WHAT))
    return out


@pytest.fixture(scope="module")
def llama_heads(decoders):
    """The Llama captures of TEXTS with query heads HEADS selected."""
    _, engine, _ = decoders["llama"]
    return engine.capture(TEXTS, what=WHAT, heads=HEADS)


def assert_same(got, want) -> None:
    """Two captures hold the same example: tokens, heads, kv_heads, bit-equal arrays."""
    assert got.tokens == want.tokens and got.layers == want.layers
    assert got.heads == want.heads and got.kv_heads == want.kv_heads
    assert got.what == want.what and got.dtype == want.dtype
    for name in want.what:
        np.testing.assert_array_equal(got.array(name), want.array(name), err_msg=name)


def test_keys_and_values_come_for_the_key_value_heads_the_query_heads_read(decoders, llama_heads):
    full = decoders["llama"][2]
    assert LLAMA_CONFIG["num_attention_heads"] // LLAMA_CONFIG["num_key_value_heads"] == 2
    for got, whole in zip(llama_heads, full, strict=True):
        assert got.heads == HEADS and got.kv_heads == KV_HEADS
        assert whole.kv_heads == (0, 0, 1, 1) and whole.key_value_heads == (0, 1)
        assert got.key_value_heads == (1,) and "kv_heads=[1, 1]" in repr(got)
        for name in ("keys", "values"):  # [L, G, T, K]: the hand-sliced G axis
            np.testing.assert_allclose(
                got.array(name), whole.array(name)[:, [1]], rtol=0, atol=1e-6
            )
        for name in ("attention", "queries"):
            np.testing.assert_allclose(
                got.array(name), whole.array(name)[:, list(HEADS)], rtol=0, atol=1e-6
            )


def test_a_head_selection_picks_key_value_heads_by_integer_division():
    from jaxattn.spec import make_spec

    args = dict(what=("keys",), layers=None, dtype="float32", num_layers=2, num_heads=8)
    spec = make_spec(heads=[1, 6], kv_heads=2, **args)
    assert (spec.kv_heads, spec.kv_axis) == ((0, 1), (0, 1))
    spec = make_spec(heads=[4, 5, 7], kv_heads=2, **args)
    assert (spec.kv_heads, spec.kv_axis) == ((1, 1, 1), (1,))
    assert make_spec(heads=[3], kv_heads=4, **args).kv_heads == (1,)
    spec = make_spec(heads=None, kv_heads=4, **args)
    assert spec.kv_heads == (0, 0, 1, 1, 2, 2, 3, 3) and spec.kv_axis == (0, 1, 2, 3)
    # the same key/value set [0, 1] from 2 and from 4 groups, read by different heads
    assert make_spec(heads=[0, 3, 5], kv_heads=2, **args).kv_heads == (0, 0, 1)
    assert make_spec(heads=[3], kv_heads=8, **args).kv_heads == ()  # no grouping: G = H
    assert make_spec(heads=[3], **args).kv_heads == ()


def test_key_value_heads_past_the_model_are_refused_naming_the_value_and_limit():
    from jaxattn.errors import UsageError
    from jaxattn.spec import check_kv_heads

    assert check_kv_heads([0, 1, 1], 2, [1, 2, 3], "the store") == (0, 1, 1)
    with pytest.raises(UsageError, match=r"key/value head 2, past .*num_key_value_heads 2"):
        check_kv_heads([1, 2], 2, [3, 4], "the store")
    with pytest.raises(UsageError, match="names 1 key/value heads for 2 query heads"):
        check_kv_heads([1], 2, [2, 3], "the store")


def test_selecting_query_heads_of_a_grouped_capture_keeps_the_key_value_heads_read(decoders):
    whole = decoders["llama"][2][0]
    got = whole.select(layers=[2, 0], heads=[3, 1, 2])
    assert got.heads == (3, 1, 2) and got.kv_heads == (1, 0, 1)
    for name in ("keys", "values"):  # the G axis: key/value heads 0 and 1, ascending
        np.testing.assert_array_equal(got.array(name), whole.array(name)[[2, 0]][:, [0, 1]])
    got = whole.select(heads=[0, 1])
    assert got.kv_heads == (0, 0) and got.keys.shape[1] == 1
    np.testing.assert_array_equal(got.values, whole.values[:, [0]])
    np.testing.assert_array_equal(got.attention, whole.attention[:, [0, 1]])


def test_the_capture_file_round_trips_decoder_captures(decoders, llama_heads, tmp_path):
    for i, cap in enumerate([*(decoders[n][2][0] for n in decoders), llama_heads[1]]):
        path = tmp_path / f"{i}.npz"
        cap.save(path)
        assert_same(type(cap).load(path), cap)
    config = dict(llama_heads[1].provenance["config"])
    assert config["causal"] and config["num_kv_heads"] == 2


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_server_and_client_carry_decoder_captures(decoders, llama_heads, name):
    from jaxattn.cli.analyze_saved import is_decoder
    from jaxattn.client import AttentionClient
    from jaxattn.views.payload import is_causal
    from service import create_server

    _, engine, full = decoders[name]
    server, port = create_server(engine, "127.0.0.1:0", max_batch_examples=8, grace_s=2.0)
    server.start()
    try:
        with AttentionClient(f"127.0.0.1:{port}", timeout=120.0) as client:
            info = client.model_info()
            assert info.causal and info.family == name
            assert (
                info.num_key_value_heads
                == engine.info.kv_heads
                == engine.info.heads // (2 if name == "llama" else 1)
            )
            assert info == engine.info
            for got, want in zip(client.capture(TEXTS, what=WHAT), full, strict=True):
                assert_same(got, want)
                # A server's capture has no config; its provenance still says causal,
                # so the saved-capture analyses and the views treat it as a decoder.
                assert got.provenance["config"] == {} and got.provenance["causal"] is True
                assert is_decoder(got) and is_causal(got)
            if name == "llama":
                for got, want in zip(
                    client.capture(TEXTS, what=WHAT, heads=HEADS), llama_heads, strict=True
                ):
                    assert_same(got, want)
                    assert got.kv_heads == KV_HEADS
    finally:
        server.stop(grace=0.5).wait(10)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_dumped_store_carries_decoder_captures(decoders, llama_heads, name, tmp_path):
    from jaxattn.dump import DumpOptions, run_dump
    from jaxattn.store import open_store
    from jaxattn.store.reader import model_info

    path, engine, full = decoders[name]
    heads, want = (HEADS, llama_heads) if name == "llama" else (None, full)
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "store.zarr"
    options = DumpOptions(input=corpus, out=str(out), what=WHAT, heads=heads, quiet=True)
    run_dump(engine, options, model_dir=path)
    store = open_store(out)
    info = model_info(store.metadata, str(out))
    assert info.causal and info.num_key_value_heads == engine.info.num_key_value_heads
    assert store.metadata["spec"].get("kv_heads", []) == list(want[0].kv_heads)
    assert len(store) == len(TEXTS)
    for got, cap in zip(store, want, strict=True):
        assert_same(got, cap)


def test_a_store_naming_key_value_heads_past_the_model_is_refused(decoders, llama_heads, tmp_path):
    from jaxattn.dump import DumpOptions, run_dump
    from jaxattn.errors import CaptureFileError
    from jaxattn.store import open_store

    path, engine, _ = decoders["llama"]
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "store.zarr"
    options = DumpOptions(input=corpus, out=str(out), what=WHAT, heads=HEADS, quiet=True)
    run_dump(engine, options, model_dir=path)
    root = json.loads((out / "zarr.json").read_text())
    root["attributes"]["jaxattn"]["spec"]["kv_heads"] = [1, 5]
    (out / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(CaptureFileError, match=r"key/value head 5, past .*num_key_value_heads 2"):
        open_store(out)


def test_decoder_maps_keep_the_rows_and_keys_asked_of_each_text(decoders):
    """query_positions / key_positions on a decoder: the whole maps sliced in numpy, texts
    of two lengths in one batch (negative positions from each one's end), the masked
    future included (-inf scores, 0 attention)."""
    _, engine, full = decoders["gpt2"]
    what = ("attention", "scores")
    caps = engine.capture(TEXTS, what=what, query_positions="-2:", key_positions=[0, -1])
    assert len({c.length for c in caps}) == 2
    for got, want in zip(caps, full, strict=True):
        n = want.length
        rows, keys = [n - 2, n - 1], [0, n - 1]
        assert got.query_positions == tuple(rows) and got.key_positions == tuple(keys)
        for name in what:
            np.testing.assert_array_equal(got.array(name), want.array(name)[:, :, rows][..., keys])
        # row n-2 cannot see the last token; the last row sees every key
        assert np.isneginf(got.scores[:, :, 0, 1]).all() and not got.attention[:, :, 0, 1].any()
        assert np.isfinite(got.scores[:, :, 1]).all()
