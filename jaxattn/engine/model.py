"""The Flax (linen) transformer of every family, per example, with declared capture:
the encoders (post-LN BERT and its kin, pre-LN ModernBERT) and the causal decoders
(GPT-2, Llama, Mistral, Qwen, Gemma, GPT-NeoX), one stack with family switches (`ModelConfig`).
(`Encoder` is the stack's name for either: it encodes the tokens it is given.)

Why linen: inference here is a pure function of (params, inputs), vmapped over
the batch and jitted per static `CaptureSpec`. linen's ``apply`` is exactly that
function, and its params are a plain pytree that conversion writes, orbax
saves and jit replicates, with no module state to split or merge.

Every module works on ONE example (shapes below carry no batch axis); the engine
vmaps. Capture is declared once by a `CaptureSpec` and returned as one dict of
stacked arrays; layers past the deepest captured one are never run, and a
quantity not asked for is never computed.

Shape legend: T query positions, S key positions (both the padded length), H
heads, K head dim, D model dim, F feed-forward dim.
"""

from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxattn.config import ModelConfig
from jaxattn.engine import blockwise, fast_forward, head_stats, layer_loop, map_positions, norms
from jaxattn.engine.attention import AttentionParts, LayerCache, SelfAttention
from jaxattn.engine.layers import (
    Dense,
    LayerNorm,
    activation,
    init,
    make_norm,
    norm_statistic,
    param,
)
from jaxattn.engine.precision import Matmul
from jaxattn.quantities import MIXING, QUANTITIES
from jaxattn.spec import CaptureSpec

# What needs the statistics of the LayerNorm after the attention block's addition.
_NEEDS_NEXT_LN = frozenset({"attn_res_ln_norm", *MIXING})
# With post-norms (Gemma) every norm quantity needs the attention output's own statistics.
_NEEDS_OUTPUT_NORM = (
    _NEEDS_NEXT_LN
    | {"alpha_fx_norm", "sum_alpha_fx_norm", "attn_res_norm"}
    | {name for name, (norm, _, _) in head_stats.KINDS.items() if norm}
)


class Embeddings(nn.Module):
    """Word (+ absolute position) (+ token type) embeddings, LayerNorm (unless
    `ModelConfig.embedding_norm` is off: GPT-2), optional projection.

    Tables are E wide; with E != D a projection to D follows the LayerNorm
    (ELECTRA, ALBERT) or precedes it (`ModelConfig.project_first`, DeBERTa).
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, ids, type_ids, start=0):  # [T], [T] -> [T, D]
        """start: the position of ids[0] (a decoding step's, `jaxattn.engine.kv_cache`)."""
        c = self.config
        e = c.embedding_width
        table = param(self, "word", init, (c.vocab_size, e))
        x = table[ids]
        if c.embed_scale:  # Gemma: sqrt(D) as a float32, then in the table's dtype (HF)
            x = x * jnp.asarray(np.float32(np.sqrt(c.hidden_size)), table.dtype)
        if c.absolute_positions:
            # RoBERTa numbers positions from padding_idx + 1 (position_offset = 2).
            positions = start + jnp.arange(ids.shape[0]) + c.position_offset
            x = x + param(self, "position", init, (c.max_positions, e))[positions]
        if c.type_vocab_size:
            x = x + param(self, "token_type", init, (c.type_vocab_size, e))[type_ids]
        project = None
        if e != c.hidden_size:
            project = Dense(
                (e, c.hidden_size),
                (c.hidden_size,),
                "TE,ED->TD",
                use_bias=c.projection_bias,
                name="project",
            )
        if project is not None and c.project_first:
            x = project(x)
        if c.embedding_norm:  # GPT-2's embeddings are the bare sum
            x = LayerNorm(c.layer_norm_eps, c.norm_bias, name="ln")(x)
        if project is not None and not c.project_first:
            x = project(x)
        return x


def _capture_layer(
    want,
    p: AttentionParts,
    x,
    gamma,
    std,
    mm: Matmul,
    mask,
    classes,
    centre: bool = True,
    heads=None,
    positions=None,
    causal: bool = False,
) -> dict:
    """The requested per-layer quantities of one example, all heads (on the blockwise
    path the `blockwise.MAPS` of `heads` only, None: all), each map at the selected
    rows and keys of `positions` (`jaxattn.engine.map_positions`; None: every one):
    the blockwise path computes its maps at those alone, the dense one gathers them
    (`map_positions.select`). `causal`: the model's (the decoder statistics' entropy
    reads keys j <= i, or every key of an encoder's rows: `head_stats.row_terms`).

    Shapes out: attention/scores/alpha_fx_norm [H, T, S]; queries [H, T, K]; keys and
    values [H_kv, T, K] (H_kv = H without grouped-query attention); fx_norm [H, S];
    sum_alpha_fx_norm, attn_res_norm and attn_res_ln_norm [T, S]; head_stats,
    norm_head_stats [H, N]; decoder_head_stats, decoder_norm_head_stats [H, P]; their
    per-row twins (row_head_stats, ...) [H, T, N] / [H, T, P];
    mixing_ratio, mixing_norm, preserving_norm [T, M].
    """
    cap, selected = {}, {}  # selected: the maps the blockwise pass computed at `positions`
    alpha, w_out = p.alpha, p.w_out
    # The norm quantities' weights: alpha, or Gemma's alpha / s'_i (EncoderLayer._post_normed).
    n_alpha = alpha if p.norm_alpha is None else p.norm_alpha
    # The norm quantities read each query head's values: head h those of its group's
    # key/value head (h // group), an [S, H, K] copy, never an [H, T, S, D] tensor.
    v = p.values_per_query_head()
    for term, t in p.score_terms().items():  # DeBERTa's score terms
        if f"scores_{term}" in want:
            cap[f"scores_{term}"] = t
    for name, t in (("queries", p.q), ("keys", p.k), ("values", p.v)):
        if name in want:
            cap[name] = t.transpose(1, 0, 2)  # [T, H, K] -> [H, T, K]
    norm_weighted = {"alpha_fx_norm"} | {n for n, k in head_stats.KINDS.items() if k[0]}
    fxn = norms.fx_norm(v, w_out, mm) if want & (norm_weighted | {"fx_norm"}) else None  # [H, S]
    if "fx_norm" in want:
        cap["fx_norm"] = fxn
    if p.blockwise is not None:  # the blockwise path's second pass (`jaxattn.engine.blockwise`)
        gram = norms.head_gram(v, w_out, mm) if "sum_alpha_fx_norm" in want else None
        got = blockwise.captures(
            p.blockwise,
            want,
            heads=heads,
            classes=classes,
            fx=fxn,
            gram=gram,
            scale=p.norm_scale,
            positions=positions,
        )
        for name, t in got.items():
            if name in blockwise.STATISTICS:  # row terms
                cap[name] = head_stats.finish(name, t, mask, classes)
            else:
                selected[name] = t
        want = want - blockwise.PASS  # computed
    for name, t in (("attention", alpha), ("scores", p.scores)):
        if name in want:
            cap[name] = t
    if "alpha_fx_norm" in want:
        cap["alpha_fx_norm"] = norms.alpha_fx_norm(n_alpha, fxn)
    kinds = {}  # (norm, decoder) -> its quantities, which share their row terms
    for name in sorted(want & head_stats.KINDS.keys()):
        kinds.setdefault(head_stats.KINDS[name][:2], []).append(name)
    for (norm, _), names in kinds.items():
        weights = alpha
        if norm:
            weights = head_stats.normalise_rows(norms.alpha_fx_norm(n_alpha, fxn))
        cap |= head_stats.dense(weights, mask, classes, tuple(names), causal)
    if "sum_alpha_fx_norm" in want:
        cap["sum_alpha_fx_norm"] = norms.sum_alpha_fx_norm(n_alpha, v, w_out, mm)
    if "attn_res_norm" in want:
        cap["attn_res_norm"] = norms.residual_norm(n_alpha, v, w_out, x, mm)
    if "attn_res_ln_norm" in want:
        cap["attn_res_ln_norm"] = norms.residual_ln_norm(
            n_alpha, v, w_out, x, gamma, std, mm, centre
        )
    if want & set(MIXING):
        mixing = norms.mixing(n_alpha, v, w_out, x, gamma, std, mm, centre)
        cap.update({name: t for name, t in mixing.items() if name in want})
    return map_positions.select(cap, positions) | selected


# The dense path's capture, jitted on its own: a capture program traces it once per
# shape and request, not once per layer (inside the vmapped program each layer's call is
# one nested call whose jaxpr and batching jax keeps; inline, its ~200 small operations,
# most of them the norms' quadratic form, were traced again at every layer). Unrolled
# all-MiniLM-L6-v2, 8 programs: tracing 3.0 to 2.4 s, lowering 1.0 to 0.5 s (issue 26).
@partial(jax.jit, static_argnums=(0, 5, 8, 9, 11))  # want, mm, centre, heads, causal
def _capture_dense_layer(
    want, p, x, gamma, std, mm, mask, classes, centre=True, heads=None, positions=None, causal=False
) -> dict:
    return _capture_layer(
        want, p, x, gamma, std, mm, mask, classes, centre, heads, positions, causal
    )


class EncoderLayer(nn.Module):
    """One transformer layer, post-LN (BERT) or pre-LN (ModernBERT), dense or GLU FFN.

    post: h = LN_a(x + attn(x)); out = LN_f(h + ffn(h)).
    pre:  h = x + attn(LN_a(x)); out = h + ffn(LN_f(h)); layer 0 has no LN_a
          when the embeddings end in one (ModernBERT; GPT-2's has it).
    parallel (pre, `ModelConfig.parallel_residual`, GPT-NeoX):
          out = x + attn(LN_a(x)) + ffn(LN_f(x)); h = x + attn(LN_a(x)) is still the
          attention block's sum the norm quantities read, but no norm reads it
          (`PARALLEL_REFUSED`).
    Either way the norm-based mixing quantities take the residual x entering
    the attention block's addition and the next LayerNorm (LN_a post, LN_f pre)
    with the real statistics of h: see `jaxattn.engine.norms`.
    """

    config: ModelConfig
    mm: Matmul = Matmul()
    index: int = 0
    block: int = 0  # > 0: attention blockwise (`jaxattn.engine.blockwise`)
    # How the attention runs where nothing is captured from the layer's weights
    # (`jaxattn.engine.fast_forward.choose`), None: as `block` says; and fast="blockwise"'s
    # block size.
    fast: str | None = None
    fast_block: int = blockwise.BLOCK

    @nn.compact
    def __call__(
        self,
        x,
        mask,
        want: frozenset[str],
        gate=None,
        output: bool = True,
        classes=None,
        rel_table=None,
        is_global=None,
        positions=None,
        heads=None,
        cache: LayerCache | None = None,
    ):
        """x [T, D] -> (the layer's output [T, D], or None when not `output`; captures).

        is_global: a rotary layer's kind as traced data (`SelfAttention`), or None.
        positions: the maps' selected rows and keys ({field: [n]},
        `jaxattn.engine.map_positions.select`), or None: every one.
        heads: the captured heads (static), None for all: the blockwise path computes
        the maps of these only (`blockwise.MAPS`).
        cache: a decoding call's key/value cache of this layer (`SelfAttention`,
        `LayerCache`: k, v [H_kv, S, K]).

        output=False (the last layer run, when its output is not captured) skips
        what only the output needs: the weighted sum and output projection
        (unless attn_res_ln_norm or the mixing quantities need the LayerNorm
        statistics) and the FFN.
        """
        c = self.config
        pre = c.norm == "pre"
        project = output or bool(want & (_NEEDS_OUTPUT_NORM if c.post_norms else _NEEDS_NEXT_LN))
        first_ln = pre and c.has_attention_ln(self.index)
        attn_in = make_norm(c, "attention_ln")(x) if first_ln else x
        attention = SelfAttention(
            c, self.mm, self.index, self.block, self.fast_block, name="attention"
        )
        # Nothing captured reads the weights: the fast forward (`fast_forward`), if any.
        fast = None if want - fast_forward.READS_NO_WEIGHTS else self.fast
        a, parts = attention(attn_in, mask, gate, project, rel_table, is_global, fast, cache)
        if c.post_norms and project:  # Gemma: h = x + N_pa(a); see _post_normed
            a, parts = self._post_normed(a, parts)
        # The LayerNorm after the attention block's addition: the block's own (post)
        # or the FFN's (pre). Its statistics of the real h fix the AttnResLn decomposition.
        next_ln = make_norm(c, "ffn_ln" if pre else "attention_ln")
        cap, std, h = {}, None, None
        if project:
            h = x + a
            std = norm_statistic(h, c.norm_type, c.layer_norm_eps)
        # A parallel residual (GPT-NeoX): the FFN's norm reads the layer input x, not h.
        normed = next_ln(x if c.parallel_residual else h) if output else None
        if want:
            gamma = self.variables["params"][next_ln.name]["scale"] + c.norm_offset
            centre = c.norm_type == "layer"  # an RMSNorm subtracts no mean
            capture = _capture_layer if parts.blockwise is not None else _capture_dense_layer
            cap = capture(
                want,
                parts,
                x,
                gamma,
                std,
                self.mm,
                mask,
                classes,
                centre,
                heads,
                positions,
                c.causal,
            )
        if not output:
            return None, cap
        ffn_out = self._ffn(normed)
        if c.post_norms:
            ffn_out = make_norm(c, "ffn_post_ln")(ffn_out)
        if c.parallel_residual:  # HF's order: mlp_output + attn_output + hidden_states
            return (ffn_out + a) + x, cap
        if pre:
            return h + ffn_out, cap
        return make_norm(c, "ffn_ln")(normed + ffn_out), cap

    def _post_normed(self, a, parts: AttentionParts):
        """Gemma's post-attention norm N_pa on the attention output a [T, D], and the parts
        the norm quantities read, with N_pa folded in (docs/families.md, Gemma).

        With N_pa's statistic s'_i = sqrt(mean(a_i^2) + eps) of the real output fixed,
        N_pa(a_i) = g' * a_i / s'_i (g' = offset + w) is linear in a_i = sum_{h,j}
        alpha^h_ij f_h(x_j) + b_O: token j's share through head h is
        (alpha^h_ij / s'_i) (v_h(x_j) W_O^h g'). So the norm quantities take alpha / s'_i
        as their weights and g' * W_O as the output projection (the softmax weights
        themselves, `attention`, stay as they are).
        """
        c = self.config
        post = make_norm(c, "attention_post_ln")
        normed = post(a)
        s = norm_statistic(a, c.norm_type, c.layer_norm_eps)  # [T]
        g = self.variables["params"][post.name]["scale"] + c.norm_offset  # [D]
        if parts.alpha is None:  # blockwise: the pass divides its weights by s
            return normed, parts.replace(norm_scale=s, w_out=g * parts.w_out)
        norm_alpha = parts.alpha / s[None, :, None]
        return normed, parts.replace(norm_alpha=norm_alpha, w_out=g * parts.w_out)

    def _ffn(self, x):
        c = self.config
        d, f = c.hidden_size, c.intermediate_size
        act = activation(c.activation)
        width = 2 * f if c.ffn == "glu" else f
        u = Dense((d, width), (width,), "TD,DF->TF", self.mm, c.mlp_bias, name="ffn_in")(x)
        if c.ffn == "gated":  # Llama: down(act(gate(x)) * up(x)); ffn_in is up_proj
            gate = Dense((d, f), (f,), "TD,DF->TF", self.mm, c.mlp_bias, name="ffn_gate")(x)
            u = act(gate) * u
        elif c.ffn == "glu":
            u = act(u[:, :f]) * u[:, f:]  # HF chunk(2): input, then gate
        else:
            u = act(u)
        return Dense((f, d), (d,), "TF,FD->TD", self.mm, c.mlp_bias, name="ffn_out")(u)


def _unrolled(run, weights: list, c: ModelConfig, x, gates, hidden: bool, args: dict, caches=None):
    """The run's layers one after another, each its own code: weights[w] is weight set w;
    caches: None, or the run's key/value caches (`layer_loop.layer_cache`)."""
    caps = []
    for i, layer in enumerate(range(run.start, run.stop)):
        module = weights[c.weights_of_layer(layer)]
        kwargs = args if caches is None else dict(args, cache=layer_loop.layer_cache(caches, i))
        x, cap = layer_loop.call_layer(module, x, layer_loop.layer_gate(gates, i), hidden, kwargs)
        caps.append(cap)
    return x, {name: jnp.stack([cap[name] for cap in caps]) for name in caps[0]}


def _check_computed(want: frozenset[str], cap: dict, config: ModelConfig) -> None:
    """At trace time: every quantity asked for came out of a captured run of layers.

    Raises:
      NotImplementedError: a requested quantity no branch of the engine computed
        (named, with the family), rather than an empty concatenation later.
    """
    missing = sorted(want - cap.keys())
    if missing:
        raise NotImplementedError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not computed by the "
            f"engine for family {config.family!r}"
        )


class Encoder(nn.Module):
    """Embeddings and layers of one example; returns the captured quantities.

    ``__call__(ids [T], type_ids [T], mask [T] bool, spec)`` returns a dict
    name -> array with the spec's layers stacked first and heads selected:
    e.g. attention [L, H, T, S], hidden_states [L+1, T, D]. Every contraction
    runs at `spec.precision` (`jaxattn.engine.precision`) on `platform`.
    Pre-LN models end in a final LayerNorm ("final_ln"): the last layer's
    hidden state is taken after it, as HF's hidden_states[-1] (ModernBERT).
    `attention` ("auto", "dense", "blockwise": `blockwise.choose_block`) runs a request
    the blockwise path serves through `jaxattn.engine.blockwise` in blocks of `block`.
    layer_loop "scan" runs alike layers as one scan and needs the weight sets
    stacked (`jaxattn.engine.layer_loop`); `init` makes the unrolled tree.
    """

    config: ModelConfig
    platform: str = "cpu"
    layer_loop: str = "unrolled"
    attention: str = "auto"  # `blockwise.POLICIES`: the dense or the blockwise path
    block: int = blockwise.BLOCK

    @nn.compact
    def __call__(
        self,
        ids,
        type_ids,
        mask,
        spec: CaptureSpec,
        gates=None,
        classes=None,
        positions=None,
        span: tuple[int, int] | None = None,
        x=None,
        shift=None,
        cache: LayerCache | None = None,
    ):
        """gates: None, or (keep [L, H] float, uniform [L, H] bool); see SelfAttention.

        classes: [T] int8 token-class bits (`jaxattn.token_classes.class_bits`),
        needed by head_stats and norm_head_stats.
        positions: the maps' selected rows and keys of this example ({field: [n]},
        `jaxattn.engine.map_positions`), None or {}: every one.
        span: (start, stop), run layers start..stop-1 only (one layer group,
        `jaxattn.engine.layer_groups`), static; x then is the hidden state [T, D]
        entering layer start (None for start 0: the embeddings), and the call
        returns (the captures of the span's captured layers, the hidden state after
        layer stop-1, or None where that layer's output is skipped). hidden_states'
        embeddings entry comes with the span that starts at layer 0.
        shift: None, or (scanned layers only) a traced int: the layers run are the
        span's moved up by it, each layer's weight set, kind and gates read at its
        own index, so groups of alike layers share one program
        (`jaxattn.engine.layer_groups.template`).
        cache: a decoder's key/value cache of every layer (`LayerCache` with k, v
        [L, H_kv, S, K], the captured keys' and values' layout), for a decoding call
        (`jaxattn.engine.kv_cache`): ids are positions cache.start.., the spec's "keys"
        and "values" come out as theirs [L, H_kv, T, K] (for the caller to write into
        the cache), and the call returns (the captures, the final hidden states [T, D],
        after the final norm).
        """
        c = self.config
        start, stop = (0, spec.last_layer + 1) if span is None else span
        want = frozenset(spec.what)
        mm = Matmul(spec.precision, self.platform)
        heads = jnp.asarray(spec.heads) if len(spec.heads) < c.num_heads else None
        # keys/values of grouped-query attention: the key/value heads the query heads read
        kv = jnp.asarray(spec.kv_axis) if 0 < len(spec.kv_axis) < c.kv_heads else None
        if start == 0:
            at = 0 if cache is None else cache.start
            x = Embeddings(c, name="embeddings")(ids, type_ids, at)
        context = dict(
            mask=mask, classes=classes, rel_table=self._relative_table(), positions=positions
        )
        if heads is not None:
            context["heads"] = tuple(spec.heads)
        chunks: dict[str, list] = {name: [] for name in spec.what}  # each [n layers, ...]
        # One module per weight set: ALBERT's layers call theirs several times.
        block = blockwise.choose_block(
            self.attention, c, spec.what, ids.shape[0], gates is not None, self.block
        )
        # Layers nothing is captured from: their attention output alone (`fast_forward`).
        fast = fast_forward.choose(self.attention, c, mm, ids.shape[0], gates is not None)
        layer = dict(block=block, fast=fast, fast_block=self.block)
        weights = [
            EncoderLayer(c, mm, index=i, **layer, name=f"layer_{i}") for i in range(c.weight_layers)
        ]
        if "hidden_states" in want and start == 0:
            chunks["hidden_states"].append(x[None])
        # decoding: every layer's output, to the next token's logits
        scan = self.layer_loop == "scan"
        runs = layer_loop.layer_runs(c, spec, scan=scan, outputs=cache is not None)
        for run in layer_loop.clip(runs, start, stop):
            layer_want = want - {"hidden_states"} if run.captured else frozenset()
            hidden = run.captured and "hidden_states" in want
            run_gates = None
            if gates is not None and shift is None:
                run_gates = (gates[0][run.start : run.stop], gates[1][run.start : run.stop])
            elif gates is not None:
                at = run.start + shift
                run_gates = tuple(lax.dynamic_slice_in_dim(g, at, len(run)) for g in gates)
            args = dict(context, want=layer_want, output=run.output)
            caches = None if cache is None else layer_loop.run_caches(cache, run)
            if self.layer_loop == "scan":
                x, cap = self._scanned(run, mm, x, run_gates, hidden, args, layer, shift, caches)
            else:
                x, cap = _unrolled(run, weights, c, x, run_gates, hidden, args, caches)
            if c.norm == "pre" and run.stop == c.num_layers and x is not None:
                # HF's final_norm; its hidden_states[-1] is this normalised last_hidden_state.
                x = make_norm(c, "final_ln")(x)
                if hidden:
                    cap["hidden_states"] = cap["hidden_states"].at[-1].set(x)
            if not run.captured:
                continue
            _check_computed(want, cap, c)
            for name, t in cap.items():
                q = QUANTITIES[name]
                pick = kv if spec.kv_heads and q.axis("G") is not None else heads
                if block and name in blockwise.MAPS:  # computed for the heads picked only
                    pick = None
                if pick is not None and q.head_axis is not None:
                    t = t[(slice(None),) * q.head_axis + (pick,)]
                chunks[name].append(t)
        out = {name: jnp.concatenate(ts) for name, ts in chunks.items() if ts}
        return out if span is None and cache is None else (out, x)

    def _scanned(
        self, run, mm, x, gates, hidden: bool, args: dict, paths: dict, shift=None, caches=None
    ):
        """The run as one scan over its weight sets (stacked params, `layer_loop`); paths:
        the layers' block, fast and fast_block (`EncoderLayer`); shift: None, or the
        traced layer offset of a shared group program (`__call__`); caches: None, or the
        run's key/value caches (`layer_loop.run_caches`)."""
        c = self.config
        layer = EncoderLayer(c, mm, index=run.start, **paths, parent=None)  # given params
        params = self.variables["params"]
        first = layer_loop.first_stacked(c)
        sets = [c.weights_of_layer(i) - first for i in range(run.start, run.stop)]
        kinds = layer_loop.global_layers(c, run)  # rotary: each layer's kind, as data
        if shift is not None:  # never at layer 0; weight sets are layers (`layer_groups.template`)
            sets = jnp.asarray(sets) + shift
            if kinds is not None:
                every = layer_loop.global_layers(c, layer_loop.Run(0, c.num_layers, True, True))
                kinds = jnp.asarray(every)[jnp.arange(run.start, run.stop) + shift]
        if len(run) == 1:  # one call; also the last layer with its output skipped (no carry)
            if shift is None and sets[0] < 0:
                p = params["layer_0"]
            else:
                p = jax.tree.map(lambda a: a[sets[0]], params["layers"])
            call = partial(layer.apply, {"params": p})
            if shift is not None and kinds is not None:
                call = partial(call, is_global=kinds[0])
            if caches is not None:
                args = dict(args, cache=layer_loop.layer_cache(caches, 0))
            y, cap = layer_loop.call_layer(call, x, layer_loop.layer_gate(gates, 0), hidden, args)
            return y, {name: t[None] for name, t in cap.items()}
        return layer_loop.run_scanned(
            layer, params["layers"], jnp.asarray(sets), x, gates, hidden, kinds, caches, **args
        )

    def _relative_table(self):
        """DeBERTa's relative embedding table [2 span, D], LayerNorm-ed when the config says."""
        c = self.config
        if c.relative is None:
            return None
        table = param(self, "rel_embeddings", init, (c.relative_rows, c.hidden_size))
        if c.relative.norm_rel_ebd:
            table = LayerNorm(c.layer_norm_eps, name="rel_ln")(table)
        return table
