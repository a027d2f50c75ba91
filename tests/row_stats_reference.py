"""Hand-written numpy of the per-row head statistics (row_head_stats,
decoder_row_head_stats; docs/reference/quantities.md) from one example's trimmed
[H, n, n] weights, row by row: the reference the engine's, the service's and the
stats-first page's per-row numbers are checked against."""

import numpy as np

from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING, HEAD_STATS
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT


def encoder_rows(w, classes):
    """Hand-written numpy: [H, n, n] weights of a trimmed map -> [H, n, N] (HEAD_STATS)."""
    h, n, _ = w.shape
    bits = classes[:n]
    out = np.full((h, n, len(HEAD_STATS)), np.nan)
    s = ENTROPY_SMOOTHING
    for i in range(n):
        row = w[:, i].astype(np.float64)
        p = (1 - s) * row + s / n
        sep = row[:, (bits & SEP_BIT) != 0].sum(-1)
        col = dict(
            cls=row[:, (bits & CLS_BIT) != 0].sum(-1),
            sep=sep,
            punct=row[:, (bits & PUNCT_BIT) != 0].sum(-1),
            self=row[:, i],
            prev=row[:, i - 1] if i >= 1 else np.zeros(h),
            next=row[:, i + 1] if i + 1 < n else np.zeros(h),
            entropy=-(p * np.log(p)).sum(-1),
        )
        col["entropy_cls"] = col["entropy"] if bits[i] & CLS_BIT else np.full(h, np.nan)
        col["sep_sep"] = sep if bits[i] & SEP_BIT else np.full(h, np.nan)
        col["rest_sep"] = np.full(h, np.nan) if bits[i] & SEP_BIT else sep
        out[:, i] = np.stack([col[name] for name in HEAD_STATS], -1)
    return out


def decoder_rows(w, classes, causal=True):
    """Hand-written numpy: [H, n, n] -> [H, n, P] (DECODER_HEAD_STATS), row 0 NaN; the
    entropy over the keys row i sees: j <= i (`causal`), every one (an encoder's)."""
    h, n, _ = w.shape
    out = np.full((h, n, len(DECODER_HEAD_STATS)), np.nan)
    s = ENTROPY_SMOOTHING
    for i in range(1, n):
        row = w[:, i, : i + 1] if causal else w[:, i]  # the keys row i sees
        row = row.astype(np.float64)
        p = (1 - s) * row + s / row.shape[-1]
        col = dict(
            first=row[:, 0],
            prev=row[:, i - 1],
            self=row[:, i],
            punct=w[:, i, (classes[:n] & PUNCT_BIT) != 0].sum(-1),
            entropy=-(p * np.log(p)).sum(-1),
        )
        out[:, i] = np.stack([col[name] for name in DECODER_HEAD_STATS], -1)
    return out


def normalised(a):
    total = a.sum(-1, keepdims=True)
    return np.where(total > 0, a / np.where(total > 0, total, 1.0), 0.0)
