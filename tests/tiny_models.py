"""Tiny random models of several families for the engine's attention-path tests (the
blockwise path, the fast forward): odd sizes, padding, pairs, causal and windowed masks,
GQA, Gemma's scale, soft cap and post-norms, GPT-NeoX's partial rotary and parallel
residual. `config_of(family, **fields)` overrides HF config fields; `params_of` gives
random params of the unrolled tree; `softmax_reference` is a float64 softmax with each
pair's visibility written out."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.checkpoints.hf_config import translate
from jaxattn.engine import layer_loop as layer_loops
from jaxattn.engine.model import Encoder
from jaxattn.spec import CaptureSpec
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT

HF = {
    "modernbert": dict(
        model_type="modernbert",
        vocab_size=61,
        hidden_size=18,
        num_attention_heads=3,
        intermediate_size=23,
        num_hidden_layers=3,
        global_attn_every_n_layers=2,  # layers 0 and 2 global, 1 local
        local_attention=40,
        global_rope_theta=1000.0,
        local_rope_theta=30.0,
        max_position_embeddings=2048,
        hidden_activation="gelu",
        norm_eps=1e-5,
        norm_bias=False,
        attention_bias=False,
        mlp_bias=False,
    ),
    "llama": dict(
        model_type="llama",
        vocab_size=61,
        hidden_size=24,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=29,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
    ),
    "mistral": dict(
        model_type="mistral",
        vocab_size=61,
        hidden_size=24,
        num_attention_heads=4,
        num_key_value_heads=1,
        num_hidden_layers=2,
        intermediate_size=29,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        sliding_window=37,
    ),
    "bert": dict(  # absolute positions, sentence pairs (token types)
        model_type="bert",
        vocab_size=61,
        hidden_size=15,
        num_attention_heads=3,
        intermediate_size=23,
        num_hidden_layers=2,
        max_position_embeddings=1024,
        type_vocab_size=2,
    ),
    "gemma2": dict(  # soft cap, query_pre_attn_scalar, post-norms, sliding layers, GQA
        model_type="gemma2",
        vocab_size=61,
        hidden_size=36,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=10,
        num_hidden_layers=3,
        intermediate_size=29,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        query_pre_attn_scalar=7,
        sliding_window=41,
        attn_logit_softcapping=3.0,
        rope_parameters={"rope_theta": 500.0},
    ),
    "gpt_neox": dict(  # partial rotary (odd: int(6 x 0.5) = 3 dims, 4 turn), parallel residual
        model_type="gpt_neox",
        vocab_size=61,
        hidden_size=30,
        num_attention_heads=5,
        num_hidden_layers=3,
        intermediate_size=37,
        max_position_embeddings=2048,
        rotary_pct=0.5,
        rotary_emb_base=500,
        use_parallel_residual=True,
    ),
}
# Gemma 3: Gemma 2's shape without the soft cap; q/k norm, sliding and full layers.
HF["gemma3"] = {k: v for k, v in HF["gemma2"].items() if k != "attn_logit_softcapping"} | dict(
    model_type="gemma3_text",
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    },
)


def config_of(family, **fields):
    """The tiny `family` model's config, HF `fields` overriding the table's."""
    return translate({**HF[family], **fields}, name=f"tiny-{family}")


def params_of(config, seed=0):
    """Random params of the unrolled tree, scaled so the softmaxes are far from uniform.
    Only the tree's shapes are traced (`jax.eval_shape`): an eager `init` would run and
    compile every op of the model one by one (~4 s a call on the test machine)."""
    x = jnp.zeros(8, jnp.int32)
    spec = CaptureSpec(what=("hidden_states",), layers=(config.num_layers - 1,), heads=(0,))
    tree = jax.eval_shape(
        lambda: Encoder(config).init(jax.random.key(seed), x, x, x > -1, spec)["params"]
    )
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: (rng.normal(size=a.shape) * 0.5).astype(np.float32), tree)


def softmax_reference(q, k, v, mask, causal, window, local, scale, cap=None):
    """float64 softmax(cap(scale q k^T)) v with the masks spelled out pair by pair (a local
    layer: |i - j| <= window // 2, a causal one 0 <= i - j < window; a query always sees
    itself): (out [T, H, K], each row's logsumexp [H, T], the weights [H, T, S])."""
    t, h, _ = q.shape
    group = h // k.shape[1]
    kk = np.repeat(k, group, axis=1).astype(np.float64)
    vv = np.repeat(v, group, axis=1).astype(np.float64)
    s = np.einsum("thk,shk->hts", q.astype(np.float64), kk) * scale
    if cap:
        s = np.tanh(s / cap) * cap
    ok = np.zeros((t, t), bool)
    for i in range(t):
        for j in range(t):
            seen = bool(mask[j]) and (j <= i or not causal)
            if local:
                inside = 0 <= i - j < window if causal else abs(i - j) <= window // 2
                seen = (seen and inside) or i == j
            ok[i, j] = seen
    s = np.where(ok[None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    return np.einsum("hts,shk->thk", w, vv), lse, w


def capture(model: Encoder, params, spec: CaptureSpec, data):
    """`model` over a batch `data` (ids, types, mask, classes, each [B, T]), jitted and
    vmapped as the engine's step: {name: numpy [B, ...]}. A scanned model
    (layer_loop="scan") gets `params` (the unrolled tree) stacked."""
    if model.layer_loop == "scan":
        params = layer_loops.stack_layers(jax.tree.map(np.asarray, params), model.config)

    @jax.jit
    def f(params, ids, types, mask, classes):
        def one(i, t, m, c):
            return model.apply({"params": params}, i, t, m, spec, None, c)

        return jax.vmap(one)(ids, types, mask, classes)

    return jax.tree.map(np.asarray, f(params, *data))


def batch(config, lengths, *, pair_from: int, punct: float = 0.0, seed: int = 1):
    """A padded batch (ids, token types, mask, token classes) of texts of `lengths`, as
    long as the first: a pair's second segment from token `pair_from` on (families with
    token types), a share `punct` of tokens marked punctuation, [CLS] first and [SEP] last."""
    t = lengths[0]
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, config.vocab_size, (len(lengths), t)).astype(np.int32)
    mask = np.arange(t)[None] < np.asarray(lengths)[:, None]
    types = np.zeros_like(ids)
    if config.type_vocab_size:
        types[:, pair_from:] = mask[:, pair_from:]
    classes = np.where(rng.random((len(lengths), t)) < punct, PUNCT_BIT, 0).astype(np.int8)
    classes[:, 0] |= CLS_BIT
    for b, n in enumerate(lengths):
        classes[b, n - 1] |= SEP_BIT
    return ids, types, mask, classes
