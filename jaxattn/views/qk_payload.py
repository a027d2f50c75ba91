"""The global query-key map's page data (numpy only): the sentence sample and its sections.

    budget = AttentionBudget(6 << 20)             # deflated attention held, at most
    sample = SentenceSample(total=len(texts), max_tokens=20000, seed=0, on_evict=budget.release)
    for i, cap in enumerate(captures):            # one pass over the corpus
        sample.offer(i, cap.length, lambda: sampled_sentence(i, cap.tokens, q, k, att, budget))
    header, sections = pack_global(sample.records(), {"pca": (xq, xk)}, ...)

Sampling is by whole sentences, uniformly over the corpus and reproducibly: each
sentence gets a random key from `seed`; the sample is the sentences of smallest
key whose tokens fit in `max_tokens` (a sentence alone over the budget is never
kept). It is kept in one pass with bounded memory: a sentence arriving with a key
above the largest key ever evicted is refused without being copied. A kept
sentence's attention is deflated at once and held only while the deflated
attention of the sentences in the sample stays within the budget (an evicted
sentence frees its share): memory is the sample's q/k vectors plus the budget.

Sections (deflate-raw, inflated by the page when needed; the header indexes them):
- "points": per kept token, its index in the header's token table (uint32) then
  its class (uint8: 0 word, 1 punctuation, 2 special; `jaxattn.token_classes`);
- "thumbs": per head, the PCA map of at most `THUMB_POINTS` points as uint8 x, y;
- one per head and layout: uint16 x, y of the n queries then the n keys, in steps of
  1/65535 of the head's larger span, the same for both axes (header
  ``layouts[name].ranges``: x0, x1, y0, y1 with x1 - x0 = y1 - y0);
- one per sampled sentence that kept its attention (`AttentionBudget`): its
  attention [L, H, T, T] as uint8 in steps of 1/255, for the click-through head view.
"""

from __future__ import annotations

import dataclasses
import heapq
import zlib
from collections.abc import Callable

import numpy as np

from jaxattn.analysis.tokens import display_tokens
from jaxattn.token_classes import detect_specials, token_masks

FORMAT = "jaxattn.views.qk/1"
MAX_TOKENS = 20000  # kept tokens per page by default: 2 x 20000 points per head
THUMB_POINTS = 3000  # points per thumbnail, queries and keys together
ATTENTION_BYTES = 6 << 20  # deflated attention embedded for the click-through view, at most
WORD, PUNCT, SPECIAL = 0, 1, 2


@dataclasses.dataclass
class SampledSentence:
    """One kept sentence: what the page shows of it and its vectors (kept until projected).

    Attributes:
      index: its position in the corpus.
      tokens: display tokens (`analysis.display_tokens`).
      classes: [T] uint8 WORD / PUNCT / SPECIAL.
      queries, keys: [L, H, T, K] float32.
      attention: its attention [L, H, T, T] as uint8 (1/255 steps), deflated (the page's
        section), or None when not captured or over the budget.
      origin: (the INPUT it came from, its example index in that INPUT: a store's record).
    """

    index: int
    tokens: list[str]
    classes: np.ndarray
    queries: np.ndarray
    keys: np.ndarray
    attention: bytes | None
    origin: tuple[int, int] = (0, 0)


def token_classes(tokens) -> np.ndarray:
    """[T] uint8: SPECIAL, PUNCT or WORD of each token."""
    masks = token_masks(list(tokens), detect_specials(list(tokens)))
    return np.where(masks["special"], SPECIAL, np.where(masks["punct"], PUNCT, WORD)).astype(
        np.uint8
    )


class AttentionBudget:
    """Deflated attention held for the page, at most `limit` bytes over the kept sentences.

    Deflating costs time (BENCHMARKS.md, "Corpus-scale views"): attention whose raw
    size times the best compression ratio seen so far would not fit is refused
    without being deflated.

    Args:
      limit: the most deflated bytes (``--global-attention-mb``).
    """

    def __init__(self, limit: int):
        self.limit, self.used, self.ratio = limit, 0, 0.0

    def take(self, attention) -> bytes | None:
        """[L, H, T, T] weights as a deflated uint8 section, or None when they would bring
        the held bytes over the limit."""
        if attention is None or self.used + np.size(attention) * self.ratio >= self.limit:
            return None
        raw = np.rint(np.clip(attention, 0, 1) * 255).astype(np.uint8).tobytes()
        packed = deflate(raw)
        self.ratio = min(self.ratio or 1.0, len(packed) / max(len(raw), 1))
        if self.used + len(packed) > self.limit:
            return None
        self.used += len(packed)
        return packed

    def release(self, record: SampledSentence) -> None:
        """Give back an evicted sentence's share (`SentenceSample`'s ``on_evict``)."""
        if record.attention is not None:
            self.used -= len(record.attention)
            record.attention = None


def sampled_sentence(
    index: int, tokens, queries, keys, attention=None, budget=None, origin=None
) -> SampledSentence:
    """The `SampledSentence` of one example's tokens and [L, H, T, *] arrays; its attention
    deflated within `budget` (an `AttentionBudget`; None: always kept)."""
    budget = budget or AttentionBudget(np.inf)
    return SampledSentence(
        index=index,
        tokens=display_tokens(tokens),
        classes=token_classes(tokens),
        # copies: a capture's arrays may be views of its whole batch's buffer
        queries=np.array(queries, np.float32, copy=True),
        keys=np.array(keys, np.float32, copy=True),
        attention=budget.take(attention),
        origin=(0, index) if origin is None else tuple(origin),
    )


class SentenceSample:
    """A uniform, seeded sample of whole sentences within a token budget (one pass).

    Args:
      total: sentences in the corpus (indices are 0 .. total - 1).
      max_tokens: the budget of kept tokens.
      seed: the random keys' seed.
      on_evict: called with each record dropped from the sample, or None.
    """

    def __init__(self, total: int, max_tokens: int, seed: int, on_evict=None):
        self.keys = np.random.default_rng(seed).random(max(total, 1))
        self.max_tokens = max_tokens
        self.threshold = np.inf
        self.kept: dict[int, tuple[int, object]] = {}
        self._heap: list[tuple[float, int]] = []  # (-key, index): the largest key first
        self.tokens = 0
        self.seen_sentences = 0
        self.seen_tokens = 0
        self.on_evict = on_evict

    def offer(self, index: int, length: int, make: Callable[[], object]) -> bool:
        """Count sentence `index` of `length` tokens; keep `make()` when it is in the
        sample so far. Returns whether it was kept."""
        self.seen_sentences += 1
        self.seen_tokens += length
        key = float(self.keys[index])
        if length > self.max_tokens or key >= self.threshold:
            return False
        # Make room first (the largest keys go), so that make() finds the budgets of
        # what is evicted already given back (e.g. the attention an `AttentionBudget` holds).
        while self.tokens + length > self.max_tokens:
            if -self._heap[0][0] < key:  # this sentence has the largest key: it goes
                self.threshold = key
                return False
            neg, worst = heapq.heappop(self._heap)
            worst_length, record = self.kept.pop(worst)
            self.tokens -= worst_length
            self.threshold = -neg
            if self.on_evict is not None:
                self.on_evict(record)
        self.kept[index] = (length, make())
        heapq.heappush(self._heap, (-key, index))
        self.tokens += length
        return True

    def records(self) -> list:
        """The kept records in corpus order."""
        return [self.kept[i][1] for i in sorted(self.kept)]

    def summary(self) -> dict:
        """What was kept of what was seen (the page says it)."""
        return dict(
            sentences=len(self.kept),
            of_sentences=self.seen_sentences,
            tokens=self.tokens,
            of_tokens=self.seen_tokens,
        )


def gather(records: list[SampledSentence]) -> tuple[np.ndarray, np.ndarray]:
    """The kept sentences' queries and keys as two [L, H, n, K] arrays, each sentence's
    own arrays released once copied (peak: the sample once, plus one sentence)."""
    n = sum(len(r.tokens) for r in records)
    L, H, _, K = records[0].queries.shape
    q, k = np.empty((L, H, n, K), np.float32), np.empty((L, H, n, K), np.float32)
    at = 0
    for r in records:
        t = len(r.tokens)
        q[:, :, at : at + t], k[:, :, at : at + t] = r.queries, r.keys
        r.queries = r.keys = None
        at += t
    return q, k


def deflate(raw: bytes) -> bytes:
    """Raw deflate (no zlib header), as the page's DecompressionStream("deflate-raw") reads."""
    z = zlib.compressobj(6, zlib.DEFLATED, -15, 8)
    return z.compress(raw) + z.flush()


def quantise(xq: np.ndarray, xk: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per head, queries then keys [G, 2n, 2] as integers in [0, levels] and the ranges
    [G, 4] (x0, x1, y0, y1). One scale for both axes (the larger span, the shorter axis
    centred), so distances and shapes keep their proportions on the page's square."""
    g = xq.shape[0] * xq.shape[1]
    pts = np.concatenate([xq.reshape(g, -1, 2), xk.reshape(g, -1, 2)], 1).astype(np.float64)
    lo, hi = pts.min(1), pts.max(1)
    span = (hi - lo).max(1)
    span = np.where(span > 0, span, 1.0)[:, None]
    lo = (lo + hi) / 2 - span / 2
    ints = np.rint((pts - lo[:, None]) / span[:, None] * levels)
    ranges = np.stack([lo[:, 0], lo[:, 0] + span[:, 0], lo[:, 1], lo[:, 1] + span[:, 0]], 1)
    return ints, ranges


def pack_global(
    records: list[SampledSentence],
    layouts: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    layers: list[int],
    heads: list[int],
    explained: np.ndarray,
    sampled: dict,
    model: str = "",
    inputs: list[str] | None = None,
) -> tuple[dict, list[bytes]]:
    """The page's JSON header and its deflate-raw sections (the module docstring).

    Args:
      records: the kept sentences, in corpus order (their tokens are the n points).
      layouts: name ("pca", "tsne", "umap") -> (queries, keys) coordinates, [L, H, n, 2].
      layers, heads: the captured layer and head indices.
      explained: [L * H, 2] the PCA axes' fractions of variance.
      sampled: `SentenceSample.summary()`.
      model: the model's name, for the page.
      inputs: the INPUTs' names (a sentence's ``origin[0]`` indexes them), for the page.

    Each of the header's ``sentences`` is [first point, tokens, corpus index, attention
    section or -1 (no click-through head view), INPUT, example index in that INPUT].
    """
    sections: list[bytes] = []

    def add(raw: bytes) -> int:
        sections.append(deflate(raw))
        return len(sections) - 1

    table: dict[str, int] = {}
    ids = [table.setdefault(t, len(table)) for r in records for t in r.tokens]
    classes = np.concatenate([r.classes for r in records]).astype(np.uint8)
    n = len(ids)
    points = add(np.asarray(ids, "<u4").tobytes() + classes.tobytes())
    out_layouts = {}
    for name, (xq, xk) in layouts.items():
        ints, ranges = quantise(xq, xk, 65535)
        parts = [add(ints[g].astype("<u2").tobytes()) for g in range(ints.shape[0])]
        out_layouts[name] = dict(ranges=ranges.tolist(), sections=parts)
    pick = np.unique(np.linspace(0, n - 1, min(n, THUMB_POINTS // 2)).astype(np.int64))
    small, _ = quantise(*(x[:, :, pick] for x in layouts["pca"]), 255)
    thumbs = add(small.astype(np.uint8).tobytes())
    sentences, start = [], 0
    for r in records:
        section = -1
        if r.attention is not None:  # deflated already (`AttentionBudget`)
            sections.append(r.attention)
            section = len(sections) - 1
        sentences.append([start, len(r.tokens), r.index, section, *map(int, r.origin)])
        start += len(r.tokens)
    header = dict(
        format=FORMAT,
        model=model,
        layers=[int(v) for v in layers],
        heads=[int(v) for v in heads],
        points=n,
        tokens=list(table),
        sentences=sentences,
        inputs=list(inputs or ["INPUT"]),
        sampled=sampled,
        explained=np.round(np.asarray(explained), 4).tolist(),
        layouts=out_layouts,
        thumbs=dict(section=thumbs, count=len(pick)),
        points_section=points,
        with_attention=sum(s[3] >= 0 for s in sentences),
    )
    return header, sections
