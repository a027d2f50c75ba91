"""layer_loop="scan": the layer stack as a scan over stacked weights, against the torch models.

The scan is the compile-time lever for GPUs (`jaxattn.engine.layer_loop`); here it
runs on the CPU for the families whose layers differ in what a scan must get
right: ALBERT (layers indexing shared weight sets), ModernBERT (pre-LN: layer 0
unstacked, local and global layers in one scan, their kind as data, the final
LayerNorm on the last hidden state) and DeBERTa v3 (one relative table for every layer). Each is
captured in one padded call and compared, text by text, with the eager torch
model (each family's reference module: hooks plus float64 norms). The run
splitting, the weight stacking and the option's errors are checked by hand.
"""

from __future__ import annotations

import types
import weakref

import numpy as np
import pytest
from deberta_fixture import load_deberta_torch, make_deberta_checkpoint
from deberta_reference import deberta_reference
from family_fixtures import make_family_checkpoint
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from modernbert_fixture import load_modernbert_torch, make_modernbert_checkpoint
from modernbert_reference import modernbert_reference
from reference import assert_matches, torch_reference

import jaxattn
from jaxattn.config import tiny
from jaxattn.engine import layer_loop
from jaxattn.engine.ablation import HeadAblation
from jaxattn.errors import UsageError
from jaxattn.positions import Rotary
from jaxattn.spec import make_spec

# What the scan's body returns per layer, the carried hidden state, and the norms.
WHAT = ("attention", "queries", "hidden_states", "alpha_fx_norm", "attn_res_ln_norm")
# family: (write its tiny checkpoint, load the torch model, reference(model, enc, monkeypatch))
FAMILIES = {
    "albert": (
        lambda d: make_family_checkpoint("albert", d),
        load_torch_model,
        lambda model, enc, _: torch_reference(model, "albert", enc),
    ),
    "modernbert": (make_modernbert_checkpoint, load_modernbert_torch, modernbert_reference),
    "deberta": (make_deberta_checkpoint, load_deberta_torch, deberta_reference),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def scanned(request, tmp_path_factory):
    make, _, _ = FAMILIES[request.param]
    path = make(tmp_path_factory.mktemp(request.param))
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), long_text(tok, 40)]
    engine = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    return request.param, path, tok, texts, engine, engine.capture(texts, what=WHAT)


def test_every_layer_equals_the_torch_reference(scanned, monkeypatch):
    family, path, tok, texts, engine, caps = scanned
    _, load, reference = FAMILIES[family]
    assert engine.step.layer_loop == "scan" and "layers" in engine.step.params
    model = load(path)
    for text, cap in zip(texts, caps, strict=True):
        a, b = (text, None) if isinstance(text, str) else text
        enc = tok(a, b, return_tensors="pt", return_token_type_ids=family != "modernbert")
        assert_matches(cap, reference(model, enc, monkeypatch), WHAT, f"{family} {text!r}")


def test_selections_and_ablation_equal_the_unrolled_program(scanned):
    """Layer and head subsets, the last layer without its output, and heads ablated."""
    family, path, _, texts, scan, _ = scanned
    unrolled = jaxattn.load(path, buckets=(48,), layer_loop="unrolled")
    last = scan.config.num_layers - 1
    requests = [
        dict(what=("attention", "keys"), layers=(1, last), heads=(0, 2)),
        dict(what=("hidden_states",), layers=(0, last)),
        dict(
            what=("attention", "hidden_states"),
            ablation=HeadAblation(zero=frozenset({(1, 1)}), uniform=frozenset({(last, 0)})),
        ),
    ]
    for request in requests:
        for got, want in zip(
            scan.capture(texts, **request), unrolled.capture(texts, **request), strict=True
        ):
            for name in request["what"]:
                np.testing.assert_allclose(
                    got.array(name),
                    want.array(name),
                    atol=2e-6,
                    err_msg=f"{family} {request} {name}",
                )


def test_the_weights_and_their_fingerprint_are_the_checkpoints(scanned):
    family, path, *_, scan, _ = scanned
    unrolled = jaxattn.load(path, buckets=(48,), layer_loop="unrolled")
    assert scan.weights_fingerprint == unrolled.weights_fingerprint
    canonical = scan.step.canonical_params()
    assert sorted(canonical) == sorted(unrolled.step.params)
    first = 1 if family == "modernbert" else 0  # pre-LN: layer 0 is not in the stack
    assert ("layer_0" in scan.step.params) == (first == 1)
    stack = scan.step.params["layers"]["attention"]["query"]["kernel"]
    assert stack.shape[0] == scan.config.weight_layers - first


def test_a_one_layer_pre_ln_model_has_nothing_to_stack(tmp_path, monkeypatch):
    """ModernBERT of one layer: its layer 0 stays unstacked and the stack is empty, so
    the params stay as they are and the scan program still equals torch."""
    path = make_modernbert_checkpoint(tmp_path, num_hidden_layers=1)
    engine = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    assert engine.step.layer_loop == "scan" and "layers" not in engine.step.params
    assert sorted(engine.step.canonical_params()) == sorted(engine.step.params)
    tok, model = load_tokenizer(path), load_modernbert_torch(path)
    [cap] = engine.capture([EXAMPLE_A], what=WHAT)
    enc = tok(EXAMPLE_A, return_tensors="pt", return_token_type_ids=False)
    assert_matches(cap, modernbert_reference(model, enc, monkeypatch), WHAT, "1 layer")


def test_runs_split_where_the_layers_code_or_capture_differs():
    spec = _spec(("attention",), layers=(1, 2, 4))
    runs = [
        (r.start, r.stop, r.captured, r.output)
        for r in layer_loop.layer_runs(tiny(num_layers=6), spec)
    ]
    # Layer 5 is never run; layer 4, the last, skips its output.
    assert runs == [
        (0, 1, False, True),
        (1, 3, True, True),
        (3, 4, False, True),
        (4, 5, True, False),
    ]
    every = _spec(("hidden_states",), layers=None)
    pre = tiny(
        num_layers=6,
        norm="pre",
        absolute_positions=False,
        rotary=Rotary(global_every=3, local_window=8),
    )
    # Pre-LN layer 0 (no attention LayerNorm) and, unrolled, global layers 0, 3 run apart;
    # a scan takes each layer's kind as data: global, local, local, global, local, local.
    assert [(r.start, r.stop) for r in layer_loop.layer_runs(pre, every)] == [
        (0, 1),
        (1, 3),
        (3, 4),
        (4, 6),
    ]
    assert [(r.start, r.stop) for r in layer_loop.layer_runs(pre, every, scan=True)] == [
        (0, 1),
        (1, 6),
    ]
    run = layer_loop.layer_runs(pre, every, scan=True)[1]
    assert layer_loop.global_layers(pre, run).tolist() == [False, False, True, False, False]
    assert layer_loop.global_layers(tiny(), run) is None


def _spec(what, layers):
    return make_spec(
        what=what, layers=layers, heads=None, dtype="float32", num_layers=6, num_heads=3
    )


def test_stacking_keeps_every_weight_and_unstacks_exactly():
    config = tiny(num_layers=3)
    rng = np.random.default_rng(0)
    params = {
        "embeddings": {"word": rng.normal(size=(5, 2))},
        **{
            f"layer_{i}": {"w": rng.normal(size=(2, 3)), "b": {"c": rng.normal(size=3)}}
            for i in range(3)
        },
    }
    stacked = layer_loop.stack_layers(params, config)
    assert sorted(stacked) == ["embeddings", "layers"]
    np.testing.assert_array_equal(stacked["layers"]["b"]["c"][2], params["layer_2"]["b"]["c"])
    back = layer_loop.unstack_layers(stacked, config)
    assert sorted(back) == sorted(params)
    for i in range(3):
        np.testing.assert_array_equal(back[f"layer_{i}"]["w"], params[f"layer_{i}"]["w"])


def test_each_stacked_weight_is_put_before_the_next_is_stacked():
    """The engine's `put` places each stacked weight as it is made: the host holds one
    stacked weight at a time beside the params, not a second copy of the stack."""
    config = tiny(num_layers=3)
    params = {f"layer_{i}": {"w": np.full((2, 3), i), "b": np.full(4, 10 + i)} for i in range(3)}
    params["embeddings"] = {"word": np.zeros((5, 2))}
    live, put = [], []

    def placed(a):  # what is alive of the stacks made before, when each arrives
        live.append(sum(r() is not None for r in put))
        put.append(weakref.ref(a))
        return a.tolist()

    stacked = layer_loop.stack_layers(params, config, put=placed)
    assert live == [0, 0]  # two stacked weights, each let go once put
    assert stacked["layers"] == {
        "b": [[10] * 4, [11] * 4, [12] * 4],
        "w": [[[0] * 3] * 2, [[1] * 3] * 2, [[2] * 3] * 2],
    }
    assert stacked["embeddings"] is params["embeddings"]


def test_the_option_names_its_values(monkeypatch):
    cpu = [types.SimpleNamespace(platform="cpu")]
    gpu = [types.SimpleNamespace(platform="gpu")]
    monkeypatch.delenv(layer_loop.ENV, raising=False)
    assert layer_loop.resolve_layer_loop(None, cpu) == "unrolled"
    assert layer_loop.resolve_layer_loop("auto", gpu) == "scan"
    assert layer_loop.resolve_layer_loop("unrolled", gpu) == "unrolled"
    with pytest.raises(UsageError, match="unknown layer_loop 'scanned': valid are auto, unrolled"):
        layer_loop.resolve_layer_loop("scanned", cpu)
    monkeypatch.setenv(layer_loop.ENV, "scan")
    assert layer_loop.resolve_layer_loop(None, cpu) == "scan"
    monkeypatch.setenv(layer_loop.ENV, "loop")
    with pytest.raises(UsageError, match=r"unknown \$JAXATTN_LAYER_LOOP 'loop'"):
        layer_loop.resolve_layer_loop(None, cpu)


def test_the_cli_offers_the_engines_values(capsys):
    from jaxattn.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--layer-loop", "scanned"])
    choices = ", ".join(repr(v) for v in layer_loop.LAYER_LOOPS)
    assert f"--layer-loop: invalid choice: 'scanned' (choose from {choices})" in (
        capsys.readouterr().err
    )
