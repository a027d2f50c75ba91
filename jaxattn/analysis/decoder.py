"""The decoder analyses: attention sinks, previous-token, duplicate-token and induction heads.

For a causal model (GPT-2; `ModelInfo.causal`), per layer and head, from the
[L, H, T, T] attention of one example (every score a mean over the query rows
it is defined for, NaN where an example has none):

- `decoder_head_statistics`: the numpy reference of the engine's
  `decoder_head_stats` (`jaxattn.quantities.DECODER_HEAD_STATS`): the weight on
  the first token (the attention sink, Xiao et al. 2023), on the previous
  token, on itself, on punctuation, and the row entropy (row i smoothed as
  Clark et al.'s code does, (1 - s) w + s / (i + 1) over the i + 1 keys it
  can see), over query rows 1 .. T-1: a causal row 0 sees only itself (weight
  1 on token 0), which says nothing about the head, and has no previous token.
- `duplicate_token_scores`: the weight of row i on the earlier occurrences j < i
  of its own token (summed when there are several), averaged over the rows that
  have one.
- `induction_scores`: the weight of row i on the tokens j + 1 just after the
  earlier occurrences j of its own token (Olsson et al. 2022's prefix
  matching; summed when there are several, and j + 1 = i, an adjacent repeat
  "a a" pointing at the row itself, left out), averaged over the rows that
  have such a token before them. On a repeated random sequence
  [r_1 .. r_n, r_1 .. r_n] of distinct tokens (`repeated_sequence_text`) those
  rows are exactly the second half, and the score is the mean attention from
  r_k's second occurrence to the token after its first. TransformerLens's
  tutorials average the whole diagonal at offset 1 - n instead, which also
  holds first-half rows: one without BOS (Main_Demo: r_n -> r_1), two with
  BOS first (ARENA: r_{n-1} -> BOS, r_n -> r_1); this score is that diagonal
  without them. TransformerLens's ``detect_head`` ("mul") divides instead by
  all the attention of all rows, rows with no earlier occurrence included;
  Olsson et al.'s evaluator (four repeats) averages attention entries, not
  rows, so a row splitting its weight over several copies counts less there.
- `AttentionSinks`: the first-token share per head, with the first token BOS
  and not BOS (two captures of the same texts, one with the BOS prepended),
  and their difference.
- `bos_sink_shares` / `BosSinks`: the same comparison on equal footing, over a
  corpus (`jaxattn.analysis.bos_sinks.bos_sink_study` makes the two captures): over
  the query rows of the text's tokens 1 .. n-1, the share on BOS, on the text's
  first token after BOS, and on that token when it is the first (no BOS):
  whether the sink is the BOS token or whatever token comes first (Xiao et
  al. 2023, sec. 3.1).
- `DecoderHeads`: all of them streamed over a corpus (`jaxattn analyze` on a
  decoder).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.weights import normalise_rows, square_maps, token_maps
from jaxattn.capture import Capture, one_capture
from jaxattn.errors import CheckpointError, UsageError
from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING
from jaxattn.selection import is_int
from jaxattn.token_classes import SpecialTokens, detect_specials, token_masks


def _rows_mean(per_row: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Mean of [..., T] over the rows where `rows` [T] is true; NaN where none is."""
    if not rows.any():
        return np.full(per_row.shape[:-1], np.nan)
    return per_row[..., rows].mean(-1)


def decoder_head_statistics(
    weights, tokens: Sequence[str], specials: SpecialTokens | None = None, causal: bool = True
) -> dict[str, np.ndarray]:
    """The statistics of `DECODER_HEAD_STATS` for one example.

    Args:
      weights: [L, H, T, T] causal attention (or norm-based weights, rows normalised).
      tokens: the T token strings (punctuation as `jaxattn.token_classes` defines it).
      specials: the special-token strings; detected from `tokens` when None.
      causal: the maps are a causal model's: row i's entropy is smoothed over the
        i + 1 keys j <= i it sees; False (an encoder's maps): over all T keys, as
        `head_statistics`' entropy.

    Returns:
      stat -> [L, H] float64, means over query rows 1 .. T-1 (NaN when T = 1).
    """
    toks = list(tokens)
    w = token_maps(weights, toks)
    t = w.shape[-1]
    punct = token_masks(toks, specials or detect_specials(toks))["punct"]
    rows = np.arange(t) >= 1
    i = np.arange(t)
    visible = i[None, :] <= i[:, None] if causal else np.ones((t, t), bool)  # [T, S]
    keys = i[:, None] + 1.0 if causal else float(t)
    s = ENTROPY_SMOOTHING
    smoothed = np.where(visible, (1.0 - s) * w + s / keys, 0.0)
    logs = np.log(smoothed, out=np.zeros_like(smoothed), where=smoothed > 0)
    below = np.zeros(w.shape[:-1])
    below[..., 1:] = np.diagonal(w, -1, -2, -1)
    out = {
        "first": w[..., 0],
        "prev": below,
        "self": np.diagonal(w, 0, -2, -1),
        "punct": w[..., punct].sum(-1),
        "entropy": -(smoothed * logs).sum(-1),
    }
    return {name: _rows_mean(out[name], rows) for name in DECODER_HEAD_STATS}


def previous_token_scores(weights) -> np.ndarray:
    """[..., T, T] -> [...]: the mean weight of rows 1 .. T-1 on their previous token
    (ARENA's ``pattern.diagonal(-1).mean()``)."""
    w = square_maps(weights)
    if w.shape[-1] < 2:
        return np.full(w.shape[:-2], np.nan)
    return np.diagonal(w, -1, -2, -1).mean(-1)


def first_token_scores(weights) -> np.ndarray:
    """[..., T, T] -> [...]: the mean weight of rows 1 .. T-1 on the first token (the sink);
    ARENA's ``pattern[:, 0].mean()`` also counts row 0 (always 1): (1 + (T-1) s) / T."""
    w = square_maps(weights)
    return _rows_mean(w[..., 0], np.arange(w.shape[-1]) >= 1)


def _earlier(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """[T, T] masks: same[i, j] = j < i holds token i; after[i, j] = j - 1 does, j < i."""
    t = len(tokens)
    codes = np.unique(np.asarray([str(x) for x in tokens], dtype=object), return_inverse=True)[1]
    codes = codes.reshape(t)
    below = np.tri(t, t, -1, dtype=bool)  # j < i
    same = (codes[:, None] == codes[None, :]) & below
    after = np.zeros_like(same)
    after[:, 1:] = same[:, :-1]  # key j + 1 after an earlier occurrence j of token i
    return same, after & below


def duplicate_token_scores(weights, tokens: Sequence) -> np.ndarray:
    """[..., T, T] and T tokens (strings or ids) -> [...]: the weight of each row on the
    earlier occurrences of its own token, averaged over the rows that have one (NaN if none)."""
    toks = list(tokens)
    w = token_maps(weights, toks)
    same, _ = _earlier(toks)
    return _rows_mean((w * same).sum(-1), same.any(-1))


def induction_scores(weights, tokens: Sequence) -> np.ndarray:
    """[..., T, T] and T tokens (strings or ids) -> [...]: the weight of each row on the
    tokens that followed earlier occurrences of its own token (prefix matching, Olsson et
    al. 2022), averaged over the rows that have such a token before them (NaN if none)."""
    toks = list(tokens)
    w = token_maps(weights, toks)
    _, after = _earlier(toks)
    return _rows_mean((w * after).sum(-1), after.any(-1))


def repeated_sequence_text(tokenizer, n: int, *, seed: int = 0) -> tuple[str, list[str]]:
    """The text of a repeated random token sequence [r_1 .. r_n, r_1 .. r_n].

    Args:
      tokenizer: a Hugging Face tokenizer (`get_vocab`, `encode`,
        `convert_tokens_to_string`), e.g. GPT-2's.
      n: the length of the random sequence, >= 2.
      seed: numpy's random seed for the choice of tokens.

    Returns:
      (text, the 2n tokens it encodes to without special tokens): n distinct
      vocabulary tokens that begin a word (a leading space, GPT-2's "Ġ") and
      encode back to themselves, in random order, twice.

    Unlike TransformerLens's tutorials, which draw token ids uniformly with
    replacement (Main_Demo: 1000 .. 9999; ARENA: the whole vocabulary, after
    BOS), the tokens are distinct (so every second-half row has exactly one
    earlier occurrence) and survive a round trip through text (`jaxattn
    analyze` takes texts); no BOS is added (the tokenizer adds its own, if any).

    Raises:
      UsageError: n < 2, no Hugging Face tokenizer (an Engine: pass
        ``engine.tokenizer.hf``), or the vocabulary has fewer than n such tokens;
        CheckpointError: the tokenizer does not encode the text back to its tokens.
    """
    if not hasattr(tokenizer, "get_vocab"):
        raise UsageError(
            "repeated_sequence_text takes a Hugging Face tokenizer (an engine's: "
            f"engine.tokenizer.hf), got {type(tokenizer).__name__}"
        )
    if not is_int(n):
        raise UsageError(f"n must be a whole number of random tokens, got {n!r}")
    if n < 2:
        raise UsageError(f"a repeated sequence needs n >= 2 random tokens, got {n}")
    vocab = tokenizer.get_vocab()
    rng = np.random.default_rng(seed)
    words = sorted(t for t in vocab if len(t) > 1 and t[0] in "Ġ▁" and t[1:].isalpha())
    chosen: list[str] = []
    for k in rng.permutation(len(words)):
        token = words[int(k)]
        if tokenizer.encode(
            tokenizer.convert_tokens_to_string([token]), add_special_tokens=False
        ) == [vocab[token]]:
            chosen.append(token)
            if len(chosen) == n:
                break
    if len(chosen) < n:
        raise UsageError(
            f"the vocabulary has {len(chosen)} word tokens that encode back to themselves, "
            f"fewer than the n = {n} asked for"
        )
    tokens = chosen + chosen
    text = tokenizer.convert_tokens_to_string(tokens)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if ids != [vocab[t] for t in tokens]:
        raise CheckpointError(
            "the tokenizer does not encode the repeated sequence back to its tokens: "
            "try another seed"
        )
    return text, tokens


def _first_share(cap: Capture) -> np.ndarray:
    if "attention" in one_capture(cap, "AttentionSinks").tensors:
        return first_token_scores(cap.attention)
    if "decoder_head_stats" in cap.tensors:
        return np.asarray(cap.decoder_head_stats, np.float64)[
            ..., DECODER_HEAD_STATS.index("first")
        ]
    raise UsageError(
        "the capture has neither attention nor decoder_head_stats: capture one of them"
    )


class AttentionSinks:
    """The attention sink (Xiao et al. 2023) per head: the first token's share.

    ``AttentionSinks(with_bos, without_bos)`` takes two captures of the same
    text, one whose first token is BOS and one without it (the second may be None:
    ``other`` and ``difference`` are then None): ``first`` and ``other`` are their
    [L, H] first-token shares (rows 1 .. T-1), ``difference`` first - other. Each
    capture needs ``attention`` or ``decoder_head_stats``.

    Raises:
      UsageError: a first capture that is None or no Capture, one with neither
        quantity, or two of different layers and heads.
    """

    def __init__(self, capture: Capture, other: Capture | None = None):
        self.first = _first_share(capture)
        self.other = None if other is None else _first_share(other)
        if self.other is not None and self.other.shape != self.first.shape:
            raise UsageError(
                f"the two captures have different layers/heads: {self.first.shape} "
                f"and {self.other.shape}"
            )
        self.difference = None if self.other is None else self.first - self.other


SINK_SHARES = ("bos", "first_after_bos", "first_without_bos")


def bos_sink_shares(with_bos, without_bos) -> dict[str, np.ndarray]:
    """The attention sink with and without BOS, on the same query tokens.

    Args:
      with_bos: [..., n+1, n+1] attention of [BOS, t_0 .. t_{n-1}] (or its Capture).
      without_bos: [..., n, n] attention of [t_0 .. t_{n-1}] (the same text, no BOS;
        or its Capture).

    Returns:
      name -> [...], each the mean over the query rows of t_1 .. t_{n-1} (the
      rows both have that see t_0 and a token after it; NaN when n < 2):
      ``bos``: the weight on BOS; ``first_after_bos``: on t_0 with BOS before
      it; ``first_without_bos``: on t_0 as the first token (no BOS).

    Raises:
      UsageError: the two are not [.., n+1, n+1] and [.., n, n] of one layout.
    """
    a, b = square_maps(with_bos), square_maps(without_bos)
    n = b.shape[-1]
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != n + 1:
        raise UsageError(
            f"attention with BOS {a.shape} must be one token longer than without {b.shape}"
        )
    if n < 2:
        return {name: np.full(b.shape[:-2], np.nan) for name in SINK_SHARES}
    return {
        "bos": a[..., 2:, 0].mean(-1),
        "first_after_bos": a[..., 2:, 1].mean(-1),
        "first_without_bos": b[..., 1:, 0].mean(-1),
    }


class BosSinks:
    """`bos_sink_shares` over a corpus: ``update(with_bos, without_bos)`` per example
    (attention [L, H, T, T] or captures holding it), then ``result()``: each share
    [L, H] the mean over the examples with n >= 2 text tokens, and ``shift`` =
    first_without_bos - first_after_bos (what the text's first token gains when
    nothing precedes it)."""

    def __init__(self):
        self.examples = 0
        self._sum: dict[str, np.ndarray] = {}

    def update(self, with_bos, without_bos) -> None:
        """Add one text's attention with BOS and without (arrays or Captures, as
        `bos_sink_shares`); a text of fewer than 2 tokens adds nothing."""
        shares = bos_sink_shares(with_bos, without_bos)
        if np.isnan(shares["bos"]).all():
            return
        for name, value in shares.items():
            if name in self._sum and self._sum[name].shape != value.shape:
                raise UsageError(
                    f"an example with {value.shape} (layers, heads) after ones with "
                    f"{self._sum[name].shape}"
                )
            self._sum[name] = self._sum.get(name, 0.0) + value
        self.examples += 1

    def result(self) -> dict[str, np.ndarray]:
        """name -> [L, H]: SINK_SHARES and shift (empty when no example counted)."""
        if not self.examples:
            return {}
        out = {name: self._sum[name] / self.examples for name in SINK_SHARES}
        out["shift"] = out["first_without_bos"] - out["first_after_bos"]
        return out


class DecoderHeads:
    """Streams the decoder analyses over a corpus: ``update(capture)``, then ``result()``.

    Each score per [L, H] is the mean over examples of the per-example mean
    (examples where it is NaN left out). From ``attention``: the statistics of
    `DECODER_HEAD_STATS`, ``induction`` and ``duplicate``; from the on-device
    ``decoder_head_stats`` alone (no maps), the statistics only. The same of the
    norm-based weights, prefixed ``norm_``, from ``alpha_fx_norm`` (rows
    normalised) or ``decoder_norm_head_stats``. An encoder's capture (its provenance's
    ``causal`` False) has its maps' entropy over every key of a row, as its tables'.
    """

    SCORES = ("induction", "duplicate")

    def __init__(self, maps: bool = True):
        """maps: read the maps where a capture has them (False: the on-device tables only,
        as `jaxattn analyze --stats-only` does)."""
        self.maps = maps
        self.examples = 0
        self._sum: dict[str, np.ndarray] = {}
        self._count: dict[str, np.ndarray] = {}

    def _add(self, name: str, value: np.ndarray) -> None:
        ok = np.isfinite(value)
        if name not in self._sum:
            self._sum[name] = np.zeros(value.shape)
            self._count[name] = np.zeros(value.shape)
        elif self._sum[name].shape != value.shape:
            raise UsageError(
                f"a capture with {value.shape} (layers, heads) after ones with "
                f"{self._sum[name].shape}: capture every example with the same layers and heads"
            )
        self._sum[name] += np.where(ok, value, 0.0)
        self._count[name] += ok

    def _add_stats(self, prefix: str, weights=None, table=None, tokens=(), causal=True) -> None:
        if weights is not None:
            stats = decoder_head_statistics(weights, tokens, causal=causal)
        else:
            table = np.asarray(table, np.float64)
            stats = {name: table[..., k] for k, name in enumerate(DECODER_HEAD_STATS)}
        for name, value in stats.items():
            self._add(prefix + name, value)

    def update(self, cap: Capture) -> None:
        """Add one capture: its maps where it holds them (and `maps` is True), else its
        on-device tables (decoder_head_stats, decoder_norm_head_stats).

        Raises:
          UsageError: no Capture, one with neither attention nor decoder_head_stats,
            or one with other layers and heads than the ones before.
        """
        one_capture(cap, "an analysis's update")
        t = (
            cap.tensors
            if self.maps
            else {k: v for k, v in cap.tensors.items() if k not in ("attention", "alpha_fx_norm")}
        )
        # An encoder's rows see every key (its on-device tables' entropy is the whole
        # row's): its maps are read so too; a capture that does not say is a decoder's.
        causal = bool(cap.provenance.get("causal", True))
        if "attention" in t:
            self._add_stats("", weights=cap.attention, tokens=cap.tokens, causal=causal)
            self._add("induction", induction_scores(cap.attention, cap.tokens))
            self._add("duplicate", duplicate_token_scores(cap.attention, cap.tokens))
        elif "decoder_head_stats" in t:
            self._add_stats("", table=cap.decoder_head_stats)
        else:
            raise UsageError("a decoder analysis needs attention or decoder_head_stats")
        if "alpha_fx_norm" in t:
            norm = normalise_rows(cap.alpha_fx_norm)
            self._add_stats("norm_", weights=norm, tokens=cap.tokens, causal=causal)
        elif "decoder_norm_head_stats" in t:
            self._add_stats("norm_", table=cap.decoder_norm_head_stats)
        self.examples += 1

    def result(self) -> dict[str, np.ndarray]:
        """name -> [L, H] (NaN where no example defined it): DECODER_HEAD_STATS, induction
        and duplicate where the captures had maps, then the norm_ statistics."""
        names = (*DECODER_HEAD_STATS, *self.SCORES, *(f"norm_{n}" for n in DECODER_HEAD_STATS))
        return {
            name: np.where(self._count[name] > 0, self._sum[name], np.nan)
            / np.maximum(self._count[name], 1)
            for name in names
            if name in self._sum
        }
