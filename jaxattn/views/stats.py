"""The stats view's data: per-head statistics and pattern classes of one example.

Everything comes from `jaxattn.analysis` (numpy only), for each weight kind the
capture holds ("attention"; "norm" = ‖αf‖ rows normalised):

- ``head_stats``: Clark et al. 2019's statistics (`analysis.head_statistics`), [L, H] each;
- ``kovaleva``: Kovaleva et al. 2019's class index of each map (`analysis.kovaleva_classes`);
- ``vig``: Vig 2019's rule-detected patterns (`analysis.vig_patterns`), [L, H] booleans.

A decoder's capture (`is_causal`) gets the decoder statistics instead, those of
`jaxattn analyze`'s "Decoder heads" (`analysis.decoder`): the first-token (sink),
previous-token, self and punctuation shares and the entropy over rows 1 .. T-1
(`DECODER_HEAD_STATS`), then the induction and duplicate-token scores; no Kovaleva
classes or Vig patterns (``classes`` and ``patterns`` empty): those name [CLS]/[SEP]
and read a bidirectional map, as `jaxattn analyze` says of a decoder.
"""

from __future__ import annotations

import numpy as np

from jaxattn.analysis import (
    HEAD_STATS,
    KOVALEVA_CLASSES,
    VIG_PATTERNS,
    DecoderHeads,
    capture_weights,
    decoder_head_statistics,
    duplicate_token_scores,
    head_statistics,
    induction_scores,
    kovaleva_classes,
    vig_patterns,
)
from jaxattn.analysis.weights import available_kinds
from jaxattn.capture import Capture
from jaxattn.quantities import DECODER_HEAD_STATS
from jaxattn.views.causal import is_causal

# A decoder's columns: `jaxattn analyze`'s "Decoder heads" (`DecoderHeads.result`)
DECODER_STATS = (*DECODER_HEAD_STATS, *DecoderHeads.SCORES)


def _grid(x: np.ndarray) -> list:
    # [L, H] -> nested lists; NaN (no [CLS] for entropy_cls) -> null
    return [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in x]


def stats_document(cap: Capture) -> dict:
    """``{"stats": HEAD_STATS, "classes": KOVALEVA_CLASSES, "patterns": VIG_PATTERNS,
    "causal": bool, "kinds": {kind: {"head_stats": {stat: [L][H]}, "kovaleva": [L][H]
    int, "vig": {pattern: [L][H] bool}}}}`` for one capture; a decoder's: "stats"
    DECODER_STATS, "classes" and "patterns" empty, "kovaleva" null (module docstring)."""
    causal = is_causal(cap)
    kinds = {}
    for kind in available_kinds(cap):
        w = capture_weights(cap, kind)
        if causal:
            stats = decoder_head_statistics(w, cap.tokens)
            scores = (induction_scores(w, cap.tokens), duplicate_token_scores(w, cap.tokens))
            stats.update(zip(DecoderHeads.SCORES, scores, strict=True))
            kinds[kind] = dict(
                head_stats={name: _grid(stats[name]) for name in DECODER_STATS},
                kovaleva=None,
                vig={},
            )
            continue
        args = (w, cap.tokens, cap.sentence_b_start)
        stats = head_statistics(w, cap.tokens)
        kinds[kind] = dict(
            head_stats={name: _grid(stats[name]) for name in HEAD_STATS},
            kovaleva=np.asarray(kovaleva_classes(*args)).astype(int).tolist(),
            vig={name: v.astype(bool).tolist() for name, v in vig_patterns(*args).items()},
        )
    return dict(
        stats=list(DECODER_STATS if causal else HEAD_STATS),
        classes=[] if causal else list(KOVALEVA_CLASSES),
        patterns=[] if causal else list(VIG_PATTERNS),
        causal=causal,
        kinds=kinds,
    )
