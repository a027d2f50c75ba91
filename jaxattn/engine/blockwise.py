"""Blockwise attention: one example's layer without a [T, T] tensor (FlashAttention's recurrence).

    r = blockwise.attention(q, k, v, mask, mm=mm, logits=scale, causal=True, block=128)
    r.out    # [T, H, K] the weighted sum of the values, what the layer continues with
    r.inputs # `Inputs`: q, k, the masks and each row's logsumexp lse [H, T]
    got = blockwise.captures(r.inputs, {"attention", "head_stats"}, heads=(3,), classes=c)
    got["attention"]   # [1, T, T] head 3's weights, written block by block
    got["head_stats"]  # {name: [H, T]} `head_stats.row_terms` of every row

The queries are cut into blocks of `block` rows and the keys into blocks of
`block` keys (the last ones padded: padded keys are masked, padded rows dropped).
For each query block a scan over the key blocks keeps each row's running
maximum m, its running sum l = sum_j exp(s_ij - m) and the running weighted sum
of the values, rescaled by exp(m_old - m_new) whenever the maximum grows
(Milakov & Gimelshein 2018; Dao et al. 2022). The softmax weights of row i are
then exp(s_ij - lse_i) with lse_i = m_i + log l_i: a second pass over the key
blocks with lse known (`captures`) gives the exact weights block by block, from
which it sums the per-head statistics' row terms (`jaxattn.engine.head_stats.row_terms`,
the same definition the dense path applies to the whole map) and writes the maps
of the selected heads into their [H_sel, T, T] outputs, one block of rows at a
time. The norm quantities (Kobayashi et al. 2020, `jaxattn.engine.norms`) take
the same weights: ||alpha f|| = alpha ||f|| per selected head, and
||sum_h alpha^h f_h|| of all heads through the per-token head Gram matrix
G_j [H, H] of each key block, never an [H, T, S, D] tensor; the norm-weighted
statistics first sum each row's norm weights sum_j alpha_ij ||f(x_j)|| over the
key blocks, then take the row terms of the normalised weights. Live memory is
O(H block^2 + T H K + T H^2) per example besides the outputs, linear in T.

With the maps' query rows and key positions selected (`captures(positions=)`,
`jaxattn.engine.map_positions`: data, so texts of any length share the program)
the maps take a pass of their own over blocks of the selected rows against blocks
of the selected keys, written straight into [H_sel, R, S']: their memory and work
are R x S', not T x T (the statistics still pass over every row and key).

The masks are `SelfAttention`'s: padded keys (the key mask), a causal model's
future (j > i), and a local layer's window (`rotary.in_window`: ModernBERT's
|i - j| <= W // 2, a decoder's 0 <= i - j < W), where a query always sees
itself. Grouped-query attention: query head h reads key/value head h // (H / H_kv),
without repeating the keys or values. Every contraction goes through the
engine's `Matmul` (its precision). A row that may see no key at all (an
example of nothing but padding) comes out NaN, as the dense softmax's.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxattn.engine import head_stats, norms, rotary
from jaxattn.engine.precision import Matmul
from jaxattn.errors import UsageError

# The default query and key block size (the engine's attention_block): measured on the
# CPU (BENCHMARKS.md, "Long context (issue 31), CPU"). Each live block tensor is
# H x block^2 x 4 bytes; a pass over T tokens runs (T / block)^2 iterations.
BLOCK = 256
# The [T, S] maps `captures` writes for the selected heads only ([H_sel, T, S]).
MAPS = frozenset({"attention", "scores", "alpha_fx_norm"})
# The per-head statistics `captures` sums row terms for, the means and the per-row ones:
# quantity -> (of the norm weights alpha ||f|| rather than alpha, the decoder's
# definitions, per row) (`head_stats.KINDS`).
STATISTICS = head_stats.KINDS
# What `captures` computes from the weights of a second pass.
PASS = MAPS | {"sum_alpha_fx_norm"} | STATISTICS.keys()
# The quantities the blockwise path computes. A request of these alone can run
# blockwise (`choose_block`).
SERVES = PASS | {"hidden_states", "queries", "keys", "values", "fx_norm"}
# The engine's attention policies (`choose_block`).
POLICIES = ("auto", "dense", "blockwise")
# "auto" goes blockwise from these padded lengths on, where it was no slower than the
# dense path on the CPU (BENCHMARKS.md, "Long context (issue 31), CPU": a ModernBERT-
# base-wide model, 2026-11-26): a request with a [T, S] map (`MAPS`, sum_alpha_fx_norm)
# from AUTO_MIN_LENGTH (blockwise took 0.8-1.1x dense's time at 640-768 tokens,
# 0.35-0.45x from 1,024, 1.5-2x at 384-512); one without (statistics, per-token
# quantities) from AUTO_MIN_LENGTH_STATS (0.24x dense's time at 512 tokens and a third
# of its memory growth; even at 256-384). AUTO_MIN_LENGTH is also where a layer nothing
# is captured from runs the blockwise forward rather than XLA's dense one
# (`jaxattn.engine.fast_forward`).
AUTO_MIN_LENGTH = 768
AUTO_MIN_LENGTH_STATS = 512


def choose_block(
    policy: str, config, what, length: int, ablated: bool = False, block: int = BLOCK
) -> int:
    """The block size a capture of `what` at padded length `length` runs its attention
    in, or 0 for the dense path.

    policy: "dense" never goes blockwise; "blockwise" whenever the request allows it;
    "auto" when it allows it and `length` >= AUTO_MIN_LENGTH (a request with a [T, S]
    map) or AUTO_MIN_LENGTH_STATS (one without). A request allows it when
    every quantity is in `SERVES`, the model has no relative positions (DeBERTa) and
    no heads are ablated.

    Raises:
      UsageError: an unknown policy or a block size that is no whole number >= 1
        (`check_block`).
    """
    if policy not in POLICIES:
        raise UsageError(f"unknown attention {policy!r}: valid are {', '.join(POLICIES)}")
    check_block(block)
    allows = set(what) <= SERVES and config.relative is None and not ablated
    if policy == "dense" or not allows:
        return 0
    mapped = set(what) & (MAPS | {"sum_alpha_fx_norm"})
    if policy == "auto" and length < (AUTO_MIN_LENGTH if mapped else AUTO_MIN_LENGTH_STATS):
        return 0
    return block


def check_block(block) -> int:
    """`block` as the int block size (the engine's option attention_block).

    Raises:
      UsageError: a bool, a non-integer or a value below 1, naming attention_block.
    """
    if isinstance(block, bool) or not isinstance(block, int | np.integer):
        raise UsageError(f"attention_block must be a whole number of tokens, got {block!r}")
    if block < 1:
        raise UsageError(f"attention_block must be at least 1, got {block}")
    return int(block)


@flax.struct.dataclass
class Inputs:
    """One example's attention inputs and geometry, what a pass over its blocks reads
    (a pytree of the arrays; the rest is static).

    Attributes:
      q: [T, H, K] queries; k: [T, H_kv, K] keys (H_kv divides H).
      mask: [T] bool, the real tokens.
      lse: [H, T] each row's logsumexp (`attention`), or None before the forward.
      local: a local layer (`allowed`): a bool, or a traced one.
      mm: the contraction of the engine's precision.
      logits: raw q.k -> the softmax's input (`attention.logits`: scale, soft cap).
      causal: key j is seen by query i only when j <= i.
      window: a local layer's window.
      block: the query and key block size.
    """

    q: jax.Array
    k: jax.Array
    mask: jax.Array
    lse: jax.Array | None = None
    local: object = False
    mm: Matmul = flax.struct.field(pytree_node=False, default=Matmul())
    logits: Callable = flax.struct.field(pytree_node=False, default=None)
    causal: bool = flax.struct.field(pytree_node=False, default=False)
    window: int = flax.struct.field(pytree_node=False, default=0)
    block: int = flax.struct.field(pytree_node=False, default=BLOCK)

    def scores(self, qblk, rows, kblk, mblk, keys):
        """(logits [H, Bq, Bk] of query block qblk [Bq, H_kv, G, K] at positions `rows`
        against key block kblk [Bk, H_kv, K] at `keys` (mask mblk), unmasked; whether
        each pair is `allowed` [Bq, Bk])."""
        shape = (self.q.shape[1], qblk.shape[0], kblk.shape[0])
        s = self.logits(self.mm("QNGK,SNK->NGQS", qblk, kblk).reshape(shape))
        return s, allowed(rows, keys, mblk, self.causal, self.window, self.local)

    def reachable(self, rows, keys, windowed: bool = True):
        """Whether any query of the block may see any key of the block, from positions
        alone (a causal model's future blocks; `windowed`: also blocks beyond a static
        local window): None when every block may. The positions of whole blocks are
        no data of the batch: under vmap the `lax.cond` it drives stays a branch, and a
        skipped block costs nothing (selected rows and keys, in any order, are: there
        vmap runs both branches and selects, the same numbers). The scores skip the
        future only: they are the logits of every pair."""
        ok = None
        first, last = rows.min(), rows.max()
        if self.causal:
            ok = keys.min() <= last
        window = self.window
        if windowed and window and self.local is True:
            reach = window if self.causal else window // 2 + 1
            near = first - keys.max() < reach
            if not self.causal:
                near = near & (keys.min() - last < reach)
            ok = near if ok is None else ok & near
        return ok

    def skipping(self, step, rows, windowed=True, skipped=None):
        """step(carry, ys) on the key blocks `reachable` from `rows`; on the others
        `skipped(carry, ys)` (None: the carry passes, no output)."""

        def run(carry, ys):
            ok = self.reachable(rows, ys[-1], windowed)
            if ok is None:
                return step(carry, ys)
            skip = (lambda c: (c, None)) if skipped is None else (lambda c: skipped(c, ys))
            return lax.cond(ok, lambda c: step(c, ys), skip, carry)

        return run


@flax.struct.dataclass
class Blockwise:
    """What `attention` computed for one example (a pytree).

    Attributes:
      out: [T, H, K] sum_j alpha_ij v_j of every query head.
      inputs: `Inputs` with each row's logsumexp, for `captures`.
    """

    out: jax.Array
    inputs: Inputs

    @property
    def lse(self) -> jax.Array:
        """[H, T] the logsumexp of each row's logits over the keys it may see."""
        return self.inputs.lse


def allowed(rows, keys, key_mask, causal: bool, window: int = 0, local=False):
    """[T', S'] bool: query rows `rows` [T'] may see keys `keys` [S'] (positions), as
    `SelfAttention`'s mask: a real key (key_mask [S']), not in a causal model's future,
    and in a local layer (`local`: a bool, or a traced one) within `window` or the
    query itself."""
    back = rows[:, None] - keys[None, :]  # i - j
    ok = jnp.broadcast_to(key_mask[None, :], back.shape)
    if causal:
        ok = ok & (back >= 0)
    if window and local is not False:
        narrowed = (ok & rotary.in_window(back, window, causal)) | (back == 0)
        ok = narrowed if local is True else jnp.where(local, narrowed, ok)
    return ok


def _blocks(t, block: int, fill=0):
    """t [T, ...] -> [n, block, ...], the last block padded with `fill`."""
    n = -(-t.shape[0] // block)
    t = jnp.pad(t, [(0, n * block - t.shape[0])] + [(0, 0)] * (t.ndim - 1), constant_values=fill)
    return t.reshape(n, block, *t.shape[1:])


def _term_names(decoder: bool) -> tuple[str, ...]:
    """The names of `head_stats.row_terms` (encoder or `decoder`)."""
    i = jnp.zeros(1, jnp.int32)
    w = jnp.zeros((1, 1, 1))
    return tuple(
        jax.eval_shape(
            lambda: head_stats.row_terms(w, i, i, i > 0, i.astype(jnp.int8), 1.0, decoder)
        )
    )


def attention(
    q,
    k,
    v,
    mask,
    *,
    mm: Matmul,
    logits: Callable,
    causal: bool = False,
    window: int = 0,
    local=False,
    block: int = BLOCK,
) -> Blockwise:
    """One example's attention, blockwise (module docstring).

    Args:
      q: [T, H, K] queries; k, v: [T, H_kv, K] keys and values (H_kv divides H).
      mask: [T] bool, the real tokens (keys past it get no weight).
      mm: the contraction of the engine's precision.
      logits: raw q.k -> the softmax's input (`attention.logits`: scale, soft cap).
      causal: key j is seen by query i only when j <= i.
      window, local: a local layer's window (`allowed`); local a bool or traced bool.
      block: the query and key block size (static; need not divide T). One over T runs
        as T: a single block of T x T, not one padded to block x block (the attention
        budget counts min(block, T)^2, `BatchPipeline.attention_bytes`).

    Returns:
      `Blockwise`.
    """
    block = min(block, q.shape[0])
    inputs = Inputs(
        q, k, mask, None, local, mm=mm, logits=logits, causal=causal, window=window, block=block
    )
    length, heads, dim = q.shape
    kv = k.shape[1]
    group = heads // kv
    qb = _blocks(q, block).reshape(-1, block, kv, group, dim)
    kb, vb, mb = _blocks(k, block), _blocks(v, block), _blocks(mask, block, False)
    pos = jnp.arange(qb.shape[0] * block).reshape(-1, block)

    def query_block(_, xs):
        qblk, rows = xs

        def forward(carry, ys):
            m, total, acc = carry  # [H, Bq], [H, Bq], [N, G, Bq, K]
            kblk, vblk, mblk, keys = ys
            s, ok = inputs.scores(qblk, rows, kblk, mblk, keys)
            s = jnp.where(ok[None], s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(-1))
            safe = jnp.where(jnp.isneginf(m_new), 0.0, m_new)  # no key yet: exp(-inf) = 0
            p = jnp.exp(s - safe[..., None])
            rescale = jnp.exp(m - safe)
            total = total * rescale + p.sum(-1)
            pv = mm("NGQS,SNK->NGQK", p.reshape(kv, group, block, block), vblk)
            acc = acc * rescale.reshape(kv, group, block, 1) + pv
            return (m_new, total, acc), None

        init = (
            jnp.full((heads, block), -jnp.inf, q.dtype),
            jnp.zeros((heads, block), q.dtype),
            jnp.zeros((kv, group, block, dim), q.dtype),
        )
        (m, total, acc), _ = lax.scan(inputs.skipping(forward, rows), init, (kb, vb, mb, pos))
        out = acc.reshape(heads, block, dim) / total[..., None]  # no key: 0 / 0
        lse = jnp.where(jnp.isneginf(m), 0.0, m) + jnp.log(total)
        return None, (out.transpose(1, 0, 2), lse)

    _, (out, lse) = lax.scan(query_block, None, (qb, pos))
    out = out.reshape(-1, heads, dim)[:length]
    lse = lse.transpose(1, 0, 2).reshape(heads, -1)[:, :length]  # [n, H, Bq] -> [H, T]
    return Blockwise(out=out, inputs=inputs.replace(lse=lse))


def captures(
    inputs: Inputs,
    want,
    *,
    heads=None,
    classes=None,
    fx=None,
    gram=None,
    scale=None,
    positions=None,
) -> dict:
    """What a second pass over the blocks computes from the exact weights (module
    docstring), for the quantities of `want` in `PASS`.

    Args:
      inputs: `attention`'s, with each row's logsumexp.
      want: quantity names; those outside `PASS` are left out.
      heads: the query heads whose `MAPS` are written (static; None: all).
      classes: [T] int8 token-class bits (the statistics).
      fx: [H, T] ||f_h(x_j)|| (`norms.fx_norm`: alpha_fx_norm and the norm statistics).
      gram: [T, H, H] the per-token head Gram matrices (`norms.head_gram`:
        sum_alpha_fx_norm).
      scale: [T] a divisor of each row's norm weights (Gemma's post-attention norm
        statistic s'_i, `model.EncoderLayer._post_normed`), or None.
      positions: the maps' selected query rows and key positions, one example's
        ({"query_positions": [R] int, "key_positions": [S'] int}, either optional,
        `jaxattn.engine.map_positions`; data, in any order), None or {}: every one.
        The maps are then computed for those rows and keys alone, in a pass of
        their own over blocks of the selected rows against blocks of the selected
        keys, and written straight into [.., R, S'] outputs: an [H_sel, T, T] map
        never exists. The statistics still take every row and key (their own pass).

    Returns:
      {name: array}: the `MAPS` [H_sel, T, S] (or [H_sel, R, S'] with `positions`;
      scores: the logits, a causal model's future exactly -inf, as the dense
      path's), sum_alpha_fx_norm [T, S] (or [R, S']), and each statistic of
      `STATISTICS` as its row terms {term: [H, T]} (`head_stats.finish` makes the
      quantity of them; quantities of the same weights and definitions, head_stats
      and row_head_stats, share one dict).
    """
    want = set(want) & PASS
    q, k, mask, lse = inputs.q, inputs.k, inputs.mask, inputs.lse
    length, nheads, dim = q.shape
    kv = k.shape[1]
    picked = np.arange(nheads) if heads is None else np.asarray(heads)
    maps = sorted(want & MAPS)
    mapped = maps + sorted(want & {"sum_alpha_fx_norm"})
    # The row terms of each kind of weights and definitions asked for, once however many
    # quantities share them (head_stats and row_head_stats): (norm, decoder) -> names.
    kinds: dict[tuple[bool, bool], list[str]] = {}
    for name in sorted(want & STATISTICS.keys()):
        kinds.setdefault(STATISTICS[name][:2], []).append(name)
    normed = any(norm for norm, _ in kinds)
    positions = positions or {}
    selected_rows = positions.get("query_positions")
    selected_keys = positions.get("key_positions")
    bk = inputs.block
    classes = classes if classes is not None else jnp.zeros(length, jnp.int8)
    fxt = (fx if fx is not None else jnp.zeros((nheads, length), q.dtype)).T  # [T, H]
    gram = gram if gram is not None else jnp.zeros((length, 0), q.dtype)
    count = mask.astype(q.dtype).sum()  # the encoder entropy's real keys

    def key_blocks(keys):
        """(k, mask, classes, fx, gram, positions), each [n, Bk, ...], of every key
        (None) or of the key positions `keys` [S'] (the last block padded with masked
        copies of the last key, so a block's positions stay within the selected ones)."""
        if keys is None:
            n = -(-length // bk)
            parts = (_blocks(k, bk), _blocks(mask, bk, False), _blocks(classes, bk))
            parts += (_blocks(fxt, bk), _blocks(gram, bk))
            return (*parts, jnp.arange(n * bk).reshape(n, bk))
        n = -(-keys.shape[0] // bk)
        at = jnp.pad(keys, (0, n * bk - keys.shape[0]), mode="edge")
        real = jnp.arange(n * bk) < keys.shape[0]
        parts = (k[at], mask[at] & real, classes[at], fxt[at], gram[at], at)
        return tuple(t.reshape(n, bk, *t.shape[1:]) for t in parts)

    def run_pass(out, rows_of, nrows: int, keys: int, xs, maps_on: bool, stats_on: bool):
        """One pass: blocks of Bq rows (`rows_of`: None, every row; else [R] positions)
        against the key blocks `xs` (`keys` of them real): the maps of `mapped` written
        into out's [.., nrows, whole key blocks] (maps_on), the statistics' row terms into its
        {term: [H, T]} (stats_on)."""
        bq = min(inputs.block, nrows)
        empty = jnp.zeros((nheads, bq), q.dtype)
        # The statistics' row terms of a block of zeros: their names, and zeros to start from.
        terms0 = {kind: {t: empty for t in _term_names(kind[1])} for kind in kinds if stats_on}
        on = mapped if maps_on else []

        def query_block(out, i):
            start = jnp.minimum(i * bq, nrows - bq)  # the last block ends at the last row
            if rows_of is None:
                rows = start + jnp.arange(bq)
                qblk = lax.dynamic_slice_in_dim(q, start, bq)
            else:
                rows = lax.dynamic_slice_in_dim(rows_of, start, bq)
                qblk = q[rows]
            qblk = qblk.reshape(bq, kv, nheads // kv, dim)
            lse_blk = lse[:, rows]  # [H, Bq]
            div = 1.0 if scale is None else 1.0 / scale[rows]

            def weights(ys):  # ([H, Bq, Bk] exact weights, their norm weights, logits)
                kblk, mblk, _, fxblk, _, keys = ys
                s, ok = inputs.scores(qblk, rows, kblk, mblk, keys)
                w = jnp.where(ok[None], jnp.exp(s - lse_blk[..., None]), 0.0)
                nw = w * (div if scale is None else div[None, :, None])
                return w, nw * fxblk.T[:, None, :], nw, s

            z = None
            if normed and stats_on:  # each row's sum of alpha ||f||: the norm weights' normaliser

                def norm_sum(z, ys):
                    return z + weights(ys)[1].sum(-1), None

                z, _ = lax.scan(inputs.skipping(norm_sum, rows), empty, xs)
                z = jnp.where(z > 0, z, 1.0)

            def add_terms(terms, weights_of, ys):  # the statistics' row terms, summed
                _, mblk, cblk, _, _, keys = ys
                for kind in terms:
                    norm, decoder = kind
                    part = head_stats.row_terms(
                        weights_of(norm),
                        rows,
                        keys,
                        mblk,
                        cblk,
                        count,
                        decoder,
                        causal=inputs.causal,
                    )
                    terms = terms | {kind: jax.tree.map(jnp.add, terms[kind], part)}
                return terms

            def step(terms, ys):
                _, _, _, _, gblk, keys = ys
                w, nwf, nw, s = weights(ys)
                got = {}
                if "attention" in on:
                    got["attention"] = w[picked]
                if "alpha_fx_norm" in on:
                    got["alpha_fx_norm"] = nwf[picked]
                if "scores" in on:
                    future = keys[None, :] > rows[:, None] if inputs.causal else False
                    got["scores"] = jnp.where(future, -jnp.inf, s[picked])
                if "sum_alpha_fx_norm" in on:
                    got["sum_alpha_fx_norm"] = norms.gram_norm(nw, gblk, inputs.mm)
                return add_terms(terms, lambda norm: nwf / z[..., None] if norm else w, ys), got

            def skipped(terms, ys):
                """A block no row may see: no weight and the future's -inf scores; the
                statistics' terms of zero weights (row_terms of one head, the same for
                all: the entropies' smoothing still counts the block's keys)."""
                got = {name: jnp.zeros((len(picked), bq, bk), q.dtype) for name in on}
                if "scores" in on:
                    got["scores"] = jnp.full_like(got["scores"], -jnp.inf)
                if "sum_alpha_fx_norm" in on:
                    got["sum_alpha_fx_norm"] = jnp.zeros((bq, bk), q.dtype)
                none = jnp.zeros((1, bq, bk), q.dtype)  # [1, Bq] terms added to every head's
                return add_terms(terms, lambda norm: none, ys), got

            run = inputs.skipping(step, rows, "scores" not in on, skipped)

            def write(carry, ys):  # each block straight into its place in the maps
                terms, maps = carry
                column, ys = ys
                terms, got = run(terms, ys)
                for name, t in got.items():  # [..., Bq, Bk] at rows `start`, keys `column`
                    at = (0,) * (t.ndim - 2) + (start, column)
                    maps = maps | {name: lax.dynamic_update_slice(maps[name], t, at)}
                return (terms, maps), None

            columns = jnp.arange(xs[0].shape[0]) * bk  # each key block's first column
            maps = {name: out[name] for name in on}
            (terms, maps), _ = lax.scan(write, (terms0, maps), (columns, xs))
            out |= maps
            for kind, rows_terms in terms.items():
                out["terms"][kind] = {
                    t: lax.dynamic_update_slice_in_dim(out["terms"][kind][t], x, start, axis=1)
                    for t, x in rows_terms.items()
                }
            return out, None

        out, _ = lax.scan(query_block, out, jnp.arange(-(-nrows // bq)))
        return out

    rows = length if selected_rows is None else selected_rows.shape[0]
    keys = length if selected_keys is None else selected_keys.shape[0]
    # The maps are written a key block at a time (`run_pass`): their width is whole
    # blocks, cut to `keys` at the end.
    width = -(-keys // bk) * bk
    out = {name: jnp.zeros((len(picked), rows, width), q.dtype) for name in maps}
    if "sum_alpha_fx_norm" in want:
        out["sum_alpha_fx_norm"] = jnp.zeros((rows, width), q.dtype)
    out["terms"] = {
        kind: {t: jnp.zeros((nheads, length), q.dtype) for t in _term_names(kind[1])}
        for kind in kinds
    }
    every = key_blocks(None)
    if selected_rows is None and selected_keys is None:  # one pass: maps and statistics
        out = run_pass(out, None, length, length, every, True, True)
    else:
        if kinds:  # the statistics: every row against every key
            out = run_pass(out, None, length, length, every, False, True)
        if mapped:  # the maps: the selected rows against the selected keys
            xs = every if selected_keys is None else key_blocks(selected_keys)
            out = run_pass(out, selected_rows, rows, keys, xs, True, False)
    terms = out.pop("terms")
    if width != keys:
        out = {name: t[..., :keys] for name, t in out.items()}
    for kind, names in kinds.items():
        out |= {name: terms[kind] for name in names}
    return out
