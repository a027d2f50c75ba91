"""The forward of layers nothing is captured from (`jaxattn.engine.fast_forward`): which
kind `choose` picks, `attend("xla")` against a float64 softmax with the masks spelled
out pair by pair, and whole captures through it against attention="dense" (every layer
dense) for several families: padding, pairs, causal, windows, GQA, Gemma's scale."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_models

from jaxattn.engine import blockwise, fast_forward
from jaxattn.engine.model import Encoder
from jaxattn.engine.precision import Matmul
from jaxattn.spec import CaptureSpec

T = 45  # odd; the second example is padded from token 31 on
LENGTHS = (T, 31)

# Each family's tiny model (`tiny_models`), shortened: windows that T = 45 crosses.
SHAPES = {
    "bert": dict(num_hidden_layers=2),  # absolute positions, a pair, padding
    "modernbert": dict(local_attention=12),  # layers 0, 2 global, 1 local |i - j| <= 6
    "llama": dict(),  # causal, GQA
    "mistral": dict(sliding_window=9),  # a causal window 0 <= i - j < 9, one kv head
    "gemma3": dict(
        sliding_window=7, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"]
    ),
    "gemma2": dict(sliding_window=7, num_hidden_layers=2),  # soft cap: blockwise forward
    "gpt_neox": dict(),  # partial rotary, parallel residual
}


def config_of(family, **fields):
    return tiny_models.config_of(family, **SHAPES[family], **fields)


# --- choose: the one place the kind is picked -------------------------------------------


def test_choose_picks_by_policy_length_precision_and_model():
    bert, gemma2 = config_of("bert"), config_of("gemma2")
    cpu = Matmul("highest", "cpu")
    long = blockwise.AUTO_MIN_LENGTH
    assert fast_forward.choose("auto", bert, cpu, long - 1, False) == "xla"
    assert fast_forward.choose("blockwise", bert, cpu, long - 1, False) == "xla"
    assert fast_forward.choose("auto", bert, cpu, long, False) == "blockwise"
    assert fast_forward.choose("auto", gemma2, cpu, 64, False) == "blockwise"  # soft cap
    assert fast_forward.choose("dense", bert, cpu, long, False) is None  # the reference
    assert fast_forward.choose("auto", bert, cpu, 64, True) is None  # heads ablated
    # tf32 on the CPU rounds every operand, the weights too: no default precision does
    assert fast_forward.choose("auto", bert, Matmul("tf32", "cpu"), 64, False) is None


def test_choose_takes_cudnn_where_its_constraints_hold(monkeypatch):
    monkeypatch.setattr(fast_forward, "_cuda", lambda: True)
    gpu16, gpu32 = Matmul("bf16", "gpu"), Matmul("highest", "gpu")
    llama, mistral = config_of("llama", head_dim=8), config_of("mistral", head_dim=8)
    modernbert, gemma2 = config_of("modernbert"), config_of("gemma2", head_dim=16)
    assert fast_forward.choose("auto", llama, gpu16, 64, False) == "cudnn"
    assert fast_forward.choose("auto", mistral, gpu16, 64, False) == "cudnn"  # left window
    assert fast_forward.choose("auto", llama, gpu32, 64, False) == "xla"  # float32: no cuDNN
    assert fast_forward.choose("auto", llama, gpu32, 32768, False) == "blockwise"
    # ModernBERT's symmetric window: cuDNN has no right window without a causal mask
    assert fast_forward.choose("auto", modernbert, gpu16, 64, False) == "xla"
    assert fast_forward.choose("auto", gemma2, gpu16, 64, False) == "blockwise"  # soft cap
    assert fast_forward.choose("auto", config_of("llama"), gpu16, 64, False) == "xla"  # K=6
    wide = config_of("llama", head_dim=136)  # past cuDNN's 128
    assert fast_forward.choose("auto", wide, gpu16, 64, False) == "xla"
    monkeypatch.setattr(fast_forward, "_cuda", lambda: False)  # ROCm
    assert fast_forward.choose("auto", llama, gpu16, 64, False) == "xla"


def test_auto_goes_blockwise_from_the_measured_lengths():
    c, stats, maps = config_of("llama"), ("decoder_head_stats",), ("attention",)
    short, long = blockwise.AUTO_MIN_LENGTH_STATS, blockwise.AUTO_MIN_LENGTH
    assert short < long  # statistics alone gain from blockwise earlier than maps
    assert blockwise.choose_block("auto", c, stats, short - 1) == 0
    assert blockwise.choose_block("auto", c, stats, short) == blockwise.BLOCK
    assert blockwise.choose_block("auto", c, maps + stats, long - 1) == 0
    assert blockwise.choose_block("auto", c, maps + stats, long) == blockwise.BLOCK
    assert blockwise.choose_block("auto", c, ("sum_alpha_fx_norm",), long - 1) == 0


# --- attend("xla") against float64 ------------------------------------------------------


ATTEND = {  # family: (kv heads, local, padded)
    "bert": (3, False, 9),
    "modernbert": (3, True, 9),  # encoder window 12: padded rows past it see themselves
    "llama": (2, False, 5),
    "mistral": (1, True, 14),  # causal window 9: padded rows past it see themselves
    "gemma3": (2, True, 4),
}


@pytest.mark.parametrize("family", ATTEND)
def test_xla_attend_equals_the_softmax_every_row(family):
    config = config_of(family)
    kv, local, padded = ATTEND[family]
    heads, dim = config.num_heads, config.head_dim
    rng = np.random.default_rng(3)
    q = rng.normal(size=(T, heads, dim)).astype(np.float32) * 2
    k = rng.normal(size=(T, kv, dim)).astype(np.float32) * 2
    v = rng.normal(size=(T, kv, dim)).astype(np.float32)
    mask = np.arange(T) < T - padded
    window = config.rotary.local_window if local else 0
    got = jax.jit(
        lambda q, k, v, m: fast_forward.attend(
            "xla", q, k, v, m, config=config, mm=Matmul(), local=local
        )
    )(q, k, v, mask)
    scale = config.query_scale**-0.5 if config.query_scale else config.head_dim**-0.5
    want, _, _ = tiny_models.softmax_reference(q, k, v, mask, config.causal, window, local, scale)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


def test_cudnn_refused_while_tracing_warns_and_runs_without_it():
    # On the CPU jax refuses implementation="cudnn" ("cuDNN is not detected"): the
    # layer runs XLA's version instead, the same numbers.
    config = config_of("llama")
    rng = np.random.default_rng(4)
    q = rng.normal(size=(11, 4, 6)).astype(np.float32)
    k = rng.normal(size=(11, 2, 6)).astype(np.float32)
    v = rng.normal(size=(11, 2, 6)).astype(np.float32)
    mask = np.arange(11) < 8
    with pytest.warns(UserWarning, match="cuDNN attention refused"):
        got = fast_forward.attend("cudnn", q, k, v, mask, config=config, mm=Matmul())
    want, _, _ = tiny_models.softmax_reference(q, k, v, mask, True, 0, False, 6**-0.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


def test_cudnn_refused_on_a_long_input_runs_blockwise_at_the_engines_block(monkeypatch):
    # Past blockwise.AUTO_MIN_LENGTH the refused layer runs the blockwise forward, at the
    # block it is given (the engine's attention_block), not the default.
    from jaxattn.engine import blockwise

    config, length = config_of("llama"), blockwise.AUTO_MIN_LENGTH + 3
    rng = np.random.default_rng(5)
    q = rng.normal(size=(length, 4, 6)).astype(np.float32)  # the config's heads and head dim
    k = rng.normal(size=(length, 2, 6)).astype(np.float32)
    v = rng.normal(size=(length, 2, 6)).astype(np.float32)
    mask = np.arange(length) < length - 5
    seen = []
    real = blockwise.attention
    monkeypatch.setattr(
        blockwise, "attention", lambda *a, **kw: seen.append(kw["block"]) or real(*a, **kw)
    )
    with pytest.warns(UserWarning, match="cuDNN attention refused"):
        got = fast_forward.attend("cudnn", q, k, v, mask, config=config, mm=Matmul(), block=97)
    assert seen == [97]
    want, _, _ = tiny_models.softmax_reference(q, k, v, mask, True, 0, False, 6**-0.5)
    real_rows = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(got)[real_rows], want[real_rows], rtol=1e-5, atol=2e-6)


def test_attend_refuses_an_unknown_kind():
    config, x = config_of("bert"), jnp.zeros((4, 3, 5))
    with pytest.raises(RuntimeError, match="unknown fast forward 'dense': valid are cudnn, xla"):
        fast_forward.attend("dense", x, x, x, jnp.ones(4, bool), config=config, mm=Matmul())


# --- whole captures: the fast forward against every layer dense -------------------------


def batch(config):
    return tiny_models.batch(config, LENGTHS, pair_from=20)


def run(config, params, what, layers, attention, loop="unrolled"):
    spec = CaptureSpec(what=what, layers=layers, heads=tuple(range(config.num_heads)))
    model = Encoder(config, layer_loop=loop, attention=attention)
    return tiny_models.capture(model, params, spec, batch(config))


CAPTURES = [  # family, quantities, layers (None: all), layer loop, the kind `choose` gives
    ("bert", ("hidden_states", "keys"), None, "unrolled", "xla"),  # every layer fast
    ("modernbert", ("hidden_states", "queries"), None, "scan", "xla"),  # kind as data
    ("mistral", ("attention", "head_stats"), (1,), "unrolled", "xla"),  # layer 0 fast
    ("gemma3", ("hidden_states", "fx_norm"), None, "unrolled", "xla"),
    ("gpt_neox", ("hidden_states", "queries"), (0, 2), "scan", "xla"),  # layer 1 fast
]


@pytest.mark.parametrize("family, what, layers, loop, kind", CAPTURES)
def test_a_capture_through_the_fast_forward_equals_the_dense_one(
    family, what, layers, loop, kind, monkeypatch
):
    config = config_of(family)
    layers = tuple(range(config.num_layers)) if layers is None else layers
    assert fast_forward.choose("auto", config, Matmul(), T, False) == kind
    params = tiny_models.params_of(config)
    calls = []
    real = fast_forward.attend

    def counted(*args, **kw):  # at trace time: once per layer body that runs it
        calls.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(fast_forward, "attend", counted)
    dense = run(config, params, what, layers, "dense", loop)
    assert not calls  # attention="dense": every layer its own dense path
    fast = run(config, params, what, layers, "auto", loop)
    assert (len(calls) > 0) == (kind == "xla")
    assert dense.keys() == fast.keys() == set(what)
    real_rows = np.arange(T)[None] < np.asarray(LENGTHS)[:, None]  # [B, T]
    for name in what:
        d, f = dense[name], fast[name]
        assert f.shape == d.shape, name
        if name in ("hidden_states", "queries", "keys", "values"):  # [B, L, (H,) T, ...]
            t_axis = 3 if name != "hidden_states" else 2
            keep = np.expand_dims(real_rows, tuple(range(1, t_axis)))
            keep = np.expand_dims(keep, tuple(range(t_axis + 1, d.ndim)))
            d, f = np.where(keep, d, 0), np.where(keep, f, 0)
        np.testing.assert_allclose(f, d, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("loop", ["unrolled", "scan"])
def test_a_layer_s_fast_forward_is_given_the_engine_s_block(loop, monkeypatch):
    """Each layer nothing is captured from hands `attend` the engine's block (Encoder's
    `block`, the engine's attention_block: where cuDNN refuses a long input, the blockwise
    forward runs at it), and the capture is the dense one."""
    config = config_of("llama")
    params = tiny_models.params_of(config)
    what, layers = ("hidden_states",), tuple(range(config.num_layers))
    dense = run(config, params, what, layers, "dense", loop)
    blocks = []
    real = fast_forward.attend

    def cudnn_refused(kind, *args, **kw):  # at trace time: once per layer body
        blocks.append(kw.get("block"))
        return real("xla", *args, **kw)

    monkeypatch.setattr(fast_forward, "choose", lambda *a: "cudnn")
    monkeypatch.setattr(fast_forward, "attend", cudnn_refused)
    spec = CaptureSpec(what=what, layers=layers, heads=tuple(range(config.num_heads)))
    model = Encoder(config, layer_loop=loop, attention="auto", block=97)
    got = tiny_models.capture(model, params, spec, batch(config))
    assert blocks and set(blocks) == {97}, blocks
    real_rows = np.arange(T)[None, None, :, None] < np.asarray(LENGTHS)[:, None, None, None]
    np.testing.assert_allclose(
        np.where(real_rows, got["hidden_states"], 0),
        np.where(real_rows, dense["hidden_states"], 0),
        rtol=2e-5,
        atol=2e-5,
    )
