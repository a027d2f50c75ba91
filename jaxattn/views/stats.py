"""The stats view's data: per-head statistics and pattern classes of one example.

Everything comes from `jaxattn.analysis` (numpy only), for each weight kind the
capture holds ("attention"; "norm" = ‖αf‖ rows normalised):

- ``head_stats``: Clark et al. 2019's statistics (`analysis.head_statistics`), [L, H] each;
- ``kovaleva``: Kovaleva et al. 2019's class index of each map (`analysis.kovaleva_classes`);
- ``vig``: Vig 2019's rule-detected patterns (`analysis.vig_patterns`), [L, H] booleans.
"""

from __future__ import annotations

import numpy as np

from jaxattn.analysis import (
    HEAD_STATS,
    KOVALEVA_CLASSES,
    VIG_PATTERNS,
    capture_weights,
    head_statistics,
    kovaleva_classes,
    vig_patterns,
)
from jaxattn.analysis.weights import available_kinds
from jaxattn.capture import Capture


def _grid(x: np.ndarray) -> list:
    # [L, H] -> nested lists; NaN (no [CLS] for entropy_cls) -> null
    return [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in x]


def stats_document(cap: Capture) -> dict:
    """``{"stats": HEAD_STATS, "classes": KOVALEVA_CLASSES, "patterns": VIG_PATTERNS,
    "kinds": {kind: {"head_stats": {stat: [L][H]}, "kovaleva": [L][H] int,
    "vig": {pattern: [L][H] bool}}}}`` for one capture."""
    kinds = {}
    for kind in available_kinds(cap):
        w = capture_weights(cap, kind)
        args = (w, cap.tokens, cap.sentence_b_start)
        stats = head_statistics(w, cap.tokens)
        kinds[kind] = dict(
            head_stats={name: _grid(stats[name]) for name in HEAD_STATS},
            kovaleva=np.asarray(kovaleva_classes(*args)).astype(int).tolist(),
            vig={name: v.astype(bool).tolist() for name, v in vig_patterns(*args).items()},
        )
    return dict(
        stats=list(HEAD_STATS),
        classes=list(KOVALEVA_CLASSES),
        patterns=list(VIG_PATTERNS),
        kinds=kinds,
    )
