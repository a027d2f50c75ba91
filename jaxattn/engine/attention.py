"""Multi-head self-attention of every family, per example, returning the parts capture needs.

One module, three ways positions enter the scores (ModelConfig decides):
absolute (BERT: positions were added to the embeddings; scores are q.k),
rotary (ModernBERT: q and k are rotated, and local layers see a window), and
relative (DeBERTa: c2c + c2p + p2c score terms from a relative embedding
table). Everything after the scores (mask, softmax, head gates, weighted sum,
output projection) is shared. A causal model (GPT-2) lets query i see keys
j <= i only: the future gets exactly zero weight, and its scores are -inf.
Grouped-query attention (Llama): H_kv < H key/value heads, query head h reads
key/value head h // (H / H_kv) (HF's repeat_kv). Qwen3's and Gemma 3's q/k norm
(ModelConfig.qk_norm) normalises each head's query and key over its K dims
with the model's own norm, before RoPE.
"""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxattn.config import ModelConfig
from jaxattn.engine import relative
from jaxattn.engine.layers import Dense, make_norm
from jaxattn.engine.precision import Matmul


@flax.struct.dataclass
class AttentionParts:
    """What one example's attention computed, for capture (a pytree: it may cross
    jax transforms). Shapes: T query positions, S key positions, H heads, K head
    dim, D model dim.

    Attributes:
      q: [T, H, K] the per-head query projections (q/k-normed with ModelConfig.qk_norm,
        then rotated in a rotary model).
      k, v: [T, H_kv, K] the per-key/value-head projections (k normed and rotated likewise);
        H_kv = H without grouped-query attention.
      scores: [H, T, S] the softmax input before the padding mask (DeBERTa: its terms'
        sum; Gemma 2: soft-capped, cap * tanh(logits / cap)); a causal model's future
        keys (j > i) exactly -inf.
      alpha: [H, T, S] the attention weights (after head ablation's uniform rows).
      w_out: [H, K, D] the output projection's kernel.
      c2c, c2p, p2c: [H, T, S] DeBERTa's scaled score terms (`jaxattn.engine.relative`);
        None where the model has no such term (every other family: all three).
      norm_alpha: [H, T, S] the weights the norm quantities read where they are not
        alpha (Gemma's post-attention norm: alpha / s'_i, `EncoderLayer._post_normed`,
        with w_out then g' * W_O); None: alpha.
      blockwise: the blockwise path's (`jaxattn.engine.blockwise`, where scores, alpha
        and norm_alpha are None): its `Inputs` with each row's logsumexp, from which
        `blockwise.captures` computes the maps and statistics; None on the dense path.
      norm_scale: [T] on the blockwise path, the divisor of each row's norm weights
        where norm_alpha would be alpha / s'_i (Gemma); None: none.
    """

    q: jax.Array
    k: jax.Array
    v: jax.Array
    scores: jax.Array | None
    alpha: jax.Array | None
    w_out: jax.Array
    c2c: jax.Array | None = None
    c2p: jax.Array | None = None
    p2c: jax.Array | None = None
    norm_alpha: jax.Array | None = None
    blockwise: object = None
    norm_scale: jax.Array | None = None

    def values_per_query_head(self) -> jax.Array:
        """v [S, H, K] of each query head: head h gets its group's key/value head
        h // (H / H_kv)."""
        return _per_query_head(self.v, self.q.shape[1])

    def score_terms(self) -> dict[str, jax.Array]:
        """The score terms computed, by name ("c2c", "c2p", "p2c"); empty but for DeBERTa."""
        terms = {"c2c": self.c2c, "c2p": self.c2p, "p2c": self.p2c}
        return {name: t for name, t in terms.items() if t is not None}


@flax.struct.dataclass
class LayerCache:
    """One layer's key/value cache of one example, for decoding (`jaxattn.engine.kv_cache`).

    Attributes:
      k, v: [H_kv, S, K] the keys (normed and rotated, as the captured "keys") and
        values of positions 0..S-1, those before `start` written (the rest unread).
      start: the position of the call's first query (a traced int32 scalar): its T
        queries are positions start..start+T-1 and see the keys at positions <= their own.
    """

    k: jax.Array
    v: jax.Array
    start: jax.Array


def logits(qk, c: ModelConfig):
    """The softmax's input from the raw products q.k (any shape): scaled by
    1 / sqrt(K) (Gemma: query_pre_attn_scalar^-1/2, a float32 product), then
    Gemma 2's soft cap, cap * tanh(logits / cap)."""
    if c.query_scale:
        qk = qk * np.float32(c.query_scale**-0.5)
    else:
        qk = qk / jnp.sqrt(c.head_dim)
    if c.attn_softcap:
        qk = jnp.tanh(qk / c.attn_softcap) * c.attn_softcap
    return qk


def _per_query_head(t, heads: int):
    """[T, H_kv, K] -> [T, H, K], each key/value head repeated for its group (HF repeat_kv)."""
    group = heads // t.shape[1]
    return t if group == 1 else jnp.repeat(t, group, axis=1)


class SelfAttention(nn.Module):
    """Self-attention of layer `index` (rotary models alternate global and local layers)."""

    config: ModelConfig
    mm: Matmul = Matmul()
    index: int = 0
    block: int = 0  # > 0: blockwise, in blocks of this many queries and keys
    fast_block: int = 0  # the block size of fast="blockwise" where `block` is 0

    @nn.compact
    def __call__(
        self,
        x,
        mask,
        gate=None,
        project: bool = True,
        rel_table=None,
        is_global=None,
        fast=None,
        cache: LayerCache | None = None,
    ):
        """x [T, D], mask [S] -> (y [T, D] or None, `AttentionParts`).

        gate: None, or (keep [H] float, uniform [H] bool) for head ablation
        (Kovaleva et al. 2019): a head with keep 0 contributes nothing; a
        uniform head attends equally to every real key.
        project: False skips the weighted sum and the output projection (y is
        None) when only the captured parts are wanted.
        rel_table: DeBERTa's (normalised) relative embedding table [2 span, D].
        is_global: rotary models: None, the layer's kind from `index`; or a traced
        bool, the kind as data, so that a scan's one body runs global and local
        layers alike (`jaxattn.engine.layer_loop`).
        block (the module's): > 0 runs `jaxattn.engine.blockwise` (no [T, S] tensor: the
        parts' scores and alpha are None, their `blockwise` inputs hold what computes
        the captures), for models without relative positions and without head ablation.
        fast: None, or how a layer nothing is captured from computes its output
        (`jaxattn.engine.fast_forward.choose`): "blockwise" as `block` > 0, "xla" or
        "cudnn" through `jax.nn.dot_product_attention` (the parts' scores and alpha are
        None; q, k and v are there).
        cache: a decoder's key/value cache (`LayerCache`): x are positions
        cache.start.. of a sequence whose earlier keys and values the cache holds; the
        parts' k and v are x's own, to be written into the cache, their scores and alpha
        None (`_cached`; `mask`, `block` and `fast` unused).
        """
        c = self.config
        hk = (c.num_heads, c.head_dim)
        proj = dict(
            shape=(c.hidden_size, *hk),
            bias_shape=hk,
            equation="TD,DHK->THK",
            mm=self.mm,
            use_bias=c.attention_bias,
        )
        query = Dense(**proj, name="query")
        if c.kv_heads != c.num_heads:  # grouped-query attention: H_kv key/value heads
            hkv = (c.kv_heads, c.head_dim)
            key_proj = dict(proj, shape=(c.hidden_size, *hkv), bias_shape=hkv)
        else:
            key_proj = proj
        key = Dense(**key_proj, name="key")
        q, k = query(x), key(x)  # [T, H, K], [T, H_kv, K]
        if c.qk_norm:  # Qwen3, Gemma 3: the model's norm over each head's K dims, before RoPE
            q = make_norm(c, "query_norm")(q)  # Gemma 3: scale (1 + w), as its other norms
            k = make_norm(c, "key_norm")(k)
        v = Dense(**key_proj, name="value")(x)
        out = Dense(
            (*hk, c.hidden_size),
            (c.hidden_size,),
            "THK,HKD->TD",
            self.mm,
            use_bias=c.attention_bias and c.attention_out_bias,
            name="out",
        )
        if cache is not None:
            return self._cached(q, k, v, cache, out, gate, project, is_global)
        if fast in ("xla", "cudnn"):  # the layer's own choice wins over the request's block
            return self._fast(fast, q, k, v, mask, out, project, is_global)
        if self.block or fast == "blockwise":
            return self._blockwise(q, k, v, mask, out, project, is_global)
        length = x.shape[0]
        allowed = jnp.broadcast_to(mask[None, :], (length, length))  # [T, S]
        terms = {}
        if c.relative is not None:
            terms = self._relative_terms(q, k, query, key, proj, rel_table)
            scores = relative.combine(terms)  # c2c + (c2p + p2c), HF's order
        else:
            if c.rotary is not None:
                q, k, allowed = self._rotate(q, k, allowed, is_global)
            scores = logits(self.mm("THK,SHK->HTS", q, _per_query_head(k, c.num_heads)), c)
        if c.causal:  # the future is no part of a decoder's scores: exactly -inf
            past = np.tril(np.ones((length, length), bool))  # key j <= query i
            scores = jnp.where(past[None], scores, -jnp.inf)
            allowed = allowed & past
        # Masked keys get exactly zero weight: exp(-inf) == 0.
        alpha = jax.nn.softmax(jnp.where(allowed[None], scores, -jnp.inf), axis=-1)
        if gate is not None:
            keep, uniform = gate
            if c.causal:  # equal weight on every real key the query may see (j <= i)
                flat = allowed / allowed.sum(-1, keepdims=True)  # [T, S]
            else:  # equal weight on every real key
                flat = jnp.broadcast_to(mask / mask.sum(), alpha.shape[1:])
            alpha = jnp.where(uniform[:, None, None], flat[None], alpha)
        y = None
        if project:
            context = self.mm("HTS,SHK->THK", alpha, _per_query_head(v, c.num_heads))
            if gate is not None:
                context = context * keep[None, :, None]
            y = out(context)
        w_out = self.variables["params"]["out"]["kernel"]  # [H, K, D]
        return y, AttentionParts(q=q, k=k, v=v, scores=scores, alpha=alpha, w_out=w_out, **terms)

    def _cached(self, q, k, v, cache: LayerCache, out, gate, project, is_global):
        """Attention of queries at positions p = cache.start + i against the cache's keys
        and values of the positions before the call and the call's own: (y or None, parts
        whose k and v are the call's own [T, H_kv, K], for the caller to write into the
        cache at cache.start; scores and alpha None).

        The cache is read, never copied: the scores against it and against the call's
        own keys are computed apart and softmaxed together. Query i sees cache rows
        j < start and the call's keys i' <= i, in a local layer only those within its
        window (`rotary.in_window` of p - j); rows at and past start (a shorter prompt's
        padding, an earlier call's leftovers) get exactly zero weight, so what they hold
        does not matter. The same scores and softmax as the dense path's causal rows.
        """
        from jaxattn.engine import rotary

        c = self.config
        start, size, n = cache.start, cache.k.shape[1], q.shape[0]
        local = False
        if c.rotary is not None:
            q, k, local = self._rotated(q, k, is_global, start=start, table=size)
        back_old = (start + jnp.arange(n))[:, None] - jnp.arange(size)[None, :]  # p - j
        back_new = np.arange(n)[:, None] - np.arange(n)[None, :]
        seen_old = jnp.broadcast_to(jnp.arange(size)[None, :] < start, (n, size))
        seen_new = jnp.asarray(back_new >= 0)
        if c.rotary is not None:
            w, causal = c.rotary.local_window, c.causal
            seen_old = seen_old & (~local | rotary.in_window(back_old, w, causal))
            seen_new = seen_new & (~local | rotary.in_window(back_new, w, causal))
        allowed = jnp.concatenate([seen_old, seen_new], axis=-1)  # [T, S + T]
        # query head h = n G + g reads key/value head n (HF's repeat_kv), with no copy
        g = c.num_heads // c.kv_heads
        qg = q.reshape(n, c.kv_heads, g, c.head_dim)
        old = self.mm("TNGK,NSK->NGTS", qg, cache.k.astype(q.dtype))
        own = self.mm("TNGK,SNK->NGTS", qg, k)
        scores = logits(jnp.concatenate([old, own], -1).reshape(c.num_heads, n, -1), c)
        alpha = jax.nn.softmax(jnp.where(allowed[None], scores, -jnp.inf), axis=-1)
        if gate is not None:  # as the dense path: equal weight on every key the query sees
            keep, uniform = gate
            flat = allowed / allowed.sum(-1, keepdims=True)
            alpha = jnp.where(uniform[:, None, None], flat[None], alpha)
        y = None
        if project:
            a = alpha.reshape(c.kv_heads, g, n, -1)
            context = self.mm("NGTS,NSK->TNGK", a[..., :size], cache.v.astype(q.dtype))
            context = context + self.mm("NGTS,SNK->TNGK", a[..., size:], v)
            context = context.reshape(n, c.num_heads, c.head_dim)
            if gate is not None:
                context = context * keep[None, :, None]
            y = out(context)
        w_out = self.variables["params"]["out"]["kernel"]
        return y, AttentionParts(q=q, k=k, v=v, scores=None, alpha=None, w_out=w_out)

    def _blockwise(self, q, k, v, mask, out, project, is_global):
        """The blockwise path (`jaxattn.engine.blockwise`): (y or None, parts without
        scores and alpha, with the blockwise inputs)."""
        from jaxattn.engine import blockwise

        c = self.config
        if c.relative is not None:
            raise NotImplementedError("blockwise attention: no relative positions (DeBERTa)")
        window, local = 0, False
        if c.rotary is not None:
            q, k, local = self._rotated(q, k, is_global)
            window = c.rotary.local_window
        r = blockwise.attention(
            q,
            k,
            v,
            mask,
            mm=self.mm,
            logits=lambda qk: logits(qk, c),
            causal=c.causal,
            window=window,
            local=local,
            block=self._block_size(),
        )
        y = out(r.out) if project else None
        w_out = self.variables["params"]["out"]["kernel"]
        parts = AttentionParts(
            q=q, k=k, v=v, scores=None, alpha=None, w_out=w_out, blockwise=r.inputs
        )
        return y, parts

    def _block_size(self) -> int:
        """The blockwise path's block size: the request's, else the engine's for a layer
        nothing is captured from (`fast_block`)."""
        from jaxattn.engine import blockwise

        return self.block or self.fast_block or blockwise.BLOCK

    def _fast(self, kind: str, q, k, v, mask, out, project, is_global):
        """The output of a layer nothing is captured from, through
        `jax.nn.dot_product_attention` (`jaxattn.engine.fast_forward`): (y or None, parts
        without scores and alpha)."""
        from jaxattn.engine import fast_forward

        c, local = self.config, False
        if c.rotary is not None:
            q, k, local = self._rotated(q, k, is_global)
        y = None
        if project:
            got = fast_forward.attend(
                kind, q, k, v, mask, config=c, mm=self.mm, local=local, block=self._block_size()
            )
            y = out(got)
        w_out = self.variables["params"]["out"]["kernel"]
        return y, AttentionParts(q=q, k=k, v=v, scores=None, alpha=None, w_out=w_out)

    def _rotated(self, q, k, is_global=None, start=None, table: int = 0):
        """(q, k) rotated with this layer's RoPE base (the first `rotary.rotated_width` dims
        of each head where the rotation is partial, `Rotary.partial`), and whether the
        layer is local: a bool, or traced when `is_global` is (None: the kind from
        `index`). q and k are positions 0..T-1, or start..start+T-1 (`start` traced) of a
        `table`-row table."""
        from jaxattn.engine import rotary

        r, length, k_dim = self.config.rotary, q.shape[0], self.config.head_dim
        dims = None if r.partial == 1 else r.dims(k_dim)  # GPT-NeoX: part of each head

        def angles(is_global: bool):
            theta = r.global_theta if is_global else r.local_theta
            scaling = r.frequency_scaling(is_global)
            cos, sin = rotary.rope_angles(table or length, k_dim, theta, scaling, dims)
            if start is None:
                return cos, sin
            return tuple(
                lax.dynamic_slice_in_dim(jnp.asarray(t), start, length) for t in (cos, sin)
            )

        if is_global is None:
            kind = r.is_global(self.index)
            cos, sin = angles(kind)
            local = not kind
        else:
            (g_cos, g_sin), (l_cos, l_sin) = angles(True), angles(False)
            cos, sin = jnp.where(is_global, g_cos, l_cos), jnp.where(is_global, g_sin, l_sin)
            local = jnp.logical_not(is_global)
        return rotary.apply_rotary(q, cos, sin), rotary.apply_rotary(k, cos, sin), local

    def _rotate(self, q, k, allowed, is_global=None):
        """RoPE on q and k with this layer's base, and `allowed` [T, S] narrowed to the
        local window in a local layer; `is_global`: None (from `index`) or traced."""
        from jaxattn.engine import rotary

        r, length = self.config.rotary, q.shape[0]

        def local(allowed):  # a padded query far from every real key still sees itself
            window = rotary.window_mask(length, r.local_window, self.config.causal)
            return (allowed & window) | np.eye(length, dtype=bool)

        q, k, is_local = self._rotated(q, k, is_global)
        if is_global is None:
            return q, k, local(allowed) if is_local else allowed
        return q, k, jnp.where(is_global, allowed, local(allowed))

    def _relative_terms(self, q, k, query, key, proj: dict, rel_table) -> dict:
        """DeBERTa's score terms {"c2c", "c2p", "p2c"}, each scaled (`jaxattn.engine.relative`).

        pos_q / pos_k are the relative table through the query / key projections,
        bias included (share_att_key), or through the layer's own pos_query /
        pos_key projections (HF pos_query_proj / pos_key_proj).
        """
        c = self.config
        r = c.relative
        if r.share_att_key:
            pos_q, pos_k = query(rel_table), key(rel_table)
        else:
            pos_k = Dense(**proj, name="pos_key")(rel_table) if "c2p" in r.att_types else None
            pos_q = Dense(**proj, name="pos_query")(rel_table) if "p2c" in r.att_types else None
        max_relative, span = relative.attention_span(r.max_relative, r.buckets, c.max_positions)
        positions = relative.relative_positions(q.shape[0], r.buckets, max_relative)
        return relative.disentangled_scores(
            q, k, pos_q, pos_k, positions, r.att_types, span, self.mm
        )
