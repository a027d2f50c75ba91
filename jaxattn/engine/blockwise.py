"""Blockwise attention: one example's layer without a [T, T] tensor (FlashAttention's recurrence).

    r = blockwise.attention(q, k, v, mask, mm=mm, logits=scale, causal=True, block=128)
    r.out   # [T, H, K] the weighted sum of the values, what the layer continues with
    r.lse   # [H, T] each row's logsumexp of its (masked) logits
    r.terms # {name: [H, T]} `head_stats.row_terms` of every row, when asked (`stats=`)

The queries are cut into blocks of `block` rows and the keys into blocks of
`block` keys (the last ones padded: padded keys are masked, padded rows dropped).
For each query block a scan over the key blocks keeps each row's running
maximum m, its running sum l = sum_j exp(s_ij - m) and the running weighted sum
of the values, rescaled by exp(m_old - m_new) whenever the maximum grows
(Milakov & Gimelshein 2018; Dao et al. 2022). The softmax weights of row i are
then exp(s_ij - lse_i) with lse_i = m_i + log l_i: a second scan over the key
blocks with lse known gives the exact weights block by block, from which the
per-head statistics' row terms are summed (`jaxattn.engine.head_stats.row_terms`,
the same definition the dense path applies to the whole map). Live memory is
O(H block^2 + T H K) per example, linear in T.

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
from jax import lax

from jaxattn.engine import head_stats, rotary
from jaxattn.engine.precision import Matmul

BLOCK = 256  # the default query and key block size
# The quantities the blockwise path computes: none is a [T, S] map. A request of
# these alone can run blockwise (`choose_block`).
SERVES = frozenset(
    {"hidden_states", "queries", "keys", "values", "fx_norm", "head_stats", "decoder_head_stats"}
)
# The engine's attention policies (`choose_block`).
POLICIES = ("auto", "dense", "blockwise")
# "auto" goes blockwise from this padded length on (unmeasured: below it the [T, T]
# maps of a layer are small, and one block would be the whole map).
AUTO_MIN_LENGTH = 1024


def choose_block(
    policy: str, config, what, length: int, ablated: bool = False, block: int = BLOCK
) -> int:
    """The block size a capture of `what` at padded length `length` runs its attention
    in, or 0 for the dense path.

    policy: "dense" never goes blockwise; "blockwise" whenever the request allows it;
    "auto" when it allows it and `length` >= AUTO_MIN_LENGTH. A request allows it when
    every quantity is in `SERVES` (not both encoder and decoder statistics), the model
    has no relative positions (DeBERTa) and no heads are ablated.

    Raises:
      ValueError: an unknown policy or a block size below 1.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown attention {policy!r}: valid are {', '.join(POLICIES)}")
    if block < 1:
        raise ValueError(f"attention block {block} must be at least 1")
    want = set(what)
    allows = (
        want <= SERVES
        and not {"head_stats", "decoder_head_stats"} <= want
        and config.relative is None
        and not ablated
    )
    if policy == "dense" or not allows:
        return 0
    if policy == "auto" and length < AUTO_MIN_LENGTH:
        return 0
    return block


def statistics_kind(want) -> str | None:
    """The `attention(stats=)` kind the quantities `want` need: "encoder" (head_stats),
    "decoder" (decoder_head_stats) or None."""
    if "head_stats" in want:
        return "encoder"
    return "decoder" if "decoder_head_stats" in want else None


@flax.struct.dataclass
class Blockwise:
    """What `attention` computed for one example (a pytree).

    Attributes:
      out: [T, H, K] sum_j alpha_ij v_j of every query head.
      lse: [H, T] the logsumexp of each row's logits over the keys it may see.
      terms: {name: [H, T]} the statistics' row terms (`head_stats.row_terms`), or None.
    """

    out: jax.Array
    lse: jax.Array
    terms: dict | None = None


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
    stats: str | None = None,
    classes=None,
) -> Blockwise:
    """One example's attention, blockwise (module docstring).

    Args:
      q: [T, H, K] queries; k, v: [T, H_kv, K] keys and values (H_kv divides H).
      mask: [T] bool, the real tokens (keys past it get no weight).
      mm: the contraction of the engine's precision.
      logits: raw q.k -> the softmax's input (`attention.logits`: scale, soft cap).
      causal: key j is seen by query i only when j <= i.
      window, local: a local layer's window (`allowed`); local a bool or traced bool.
      block: the query and key block size (static; need not divide T).
      stats: None, "encoder" or "decoder": also sum the row terms of `head_stats`.
      classes: [T] int8 token-class bits (with `stats`).

    Returns:
      `Blockwise`.
    """
    length, heads, dim = q.shape
    kv = k.shape[1]
    group = heads // kv
    n = -(-length // block)
    pad = n * block - length

    def blocks(t, fill=0):
        t = jnp.pad(t, [(0, pad)] + [(0, 0)] * (t.ndim - 1), constant_values=fill)
        return t.reshape(n, block, *t.shape[1:])

    qb = blocks(q).reshape(n, block, kv, group, dim)
    kb, vb, mb = blocks(k), blocks(v), blocks(mask, False)
    cb = blocks(classes if classes is not None else jnp.zeros(length, jnp.int8))
    pos = jnp.arange(n * block).reshape(n, block)
    count = mask.astype(q.dtype).sum()  # the encoder entropy's real keys

    def scores(qblk, rows, kblk, mblk, keys):  # -> [H, Bq, Bk] logits, masked -inf
        s = logits(mm("QNGK,SNK->NGQS", qblk, kblk).reshape(heads, block, block))
        ok = allowed(rows, keys, mblk, causal, window, local)
        return jnp.where(ok[None], s, -jnp.inf), ok

    def reachable(rows, keys, windowed: bool):
        """Whether any query of the block may see any key of the block, from positions
        alone (a causal model's future blocks; `windowed`: also blocks beyond a static
        local window): None when every block may. Positions are no data of the batch:
        under vmap the `lax.cond` it drives stays a branch, and a skipped block costs
        nothing. The statistics skip the future only: the entropies' smoothing counts
        every real key a row could see without the window."""
        ok = None
        if causal:
            ok = keys[0] <= rows[-1]
        if windowed and window and local is True:
            reach = window if causal else window // 2 + 1
            near = rows[0] - keys[-1] < reach
            if not causal:
                near = near & (keys[0] - rows[-1] < reach)
            ok = near if ok is None else ok & near
        return ok

    def skipping(step, rows, windowed=True):  # step(carry, ys) on reachable key blocks
        def run(carry, ys):
            ok = reachable(rows, ys[-1], windowed)
            if ok is None:
                return step(carry, ys)
            return lax.cond(ok, lambda c: step(c, ys), lambda c: (c, None), carry)

        return run

    def query_block(_, xs):
        qblk, rows = xs

        def forward(carry, ys):
            m, total, acc = carry  # [H, Bq], [H, Bq], [N, G, Bq, K]
            kblk, vblk, mblk, _, keys = ys
            s, _ = scores(qblk, rows, kblk, mblk, keys)
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
        (m, total, acc), _ = lax.scan(skipping(forward, rows), init, (kb, vb, mb, cb, pos))
        out = acc.reshape(heads, block, dim) / total[..., None]  # no key: 0 / 0
        lse = jnp.where(jnp.isneginf(m), 0.0, m) + jnp.log(total)
        terms = None
        if stats is not None:

            def statistics(total, ys):
                kblk, _, mblk, cblk, keys = ys
                s, ok = scores(qblk, rows, kblk, mblk, keys)
                w = jnp.where(ok[None], jnp.exp(s - lse[..., None]), 0.0)  # exact weights
                part = head_stats.row_terms(
                    w, rows, keys, mblk, cblk, count, decoder=stats == "decoder"
                )
                return jax.tree.map(jnp.add, total, part), None

            zero = jnp.zeros((heads, block), q.dtype)
            shapes = jax.eval_shape(
                lambda: head_stats.row_terms(
                    jnp.zeros((heads, block, block), q.dtype),
                    rows,
                    rows,
                    mb[0],
                    cb[0],
                    count,
                    decoder=stats == "decoder",
                )
            )
            total = {name: zero for name in shapes}
            terms, _ = lax.scan(skipping(statistics, rows, False), total, (kb, vb, mb, cb, pos))
        return None, (out.transpose(1, 0, 2), lse, terms)

    _, (out, lse, terms) = lax.scan(query_block, None, (qb, pos))

    def rows_first(t):  # [n, H, Bq] -> [H, T]
        return t.transpose(1, 0, 2).reshape(heads, n * block)[:, :length]

    out = out.reshape(n * block, heads, dim)[:length]
    terms = None if terms is None else {name: rows_first(t) for name, t in terms.items()}
    return Blockwise(out=out, lse=rows_first(lse), terms=terms)
