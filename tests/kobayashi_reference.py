"""Kobayashi et al. 2021's context-mixing ratio, written from the authors' released code.

gorokoba560/norm-analysis-of-transformer, emnlp2021/transformers/src/transformers/
modeling_bert.py, ``BertNormOutput``: from the materialised contribution vectors
v_ij of a measure ([T, S, D]), the preserving vector is the diagonal v_ii, the
mixing vector the row sum without it, and the ratio is
||mixing|| / (||mixing|| + ||preserving||). A test reference: float64, naive.
"""

from __future__ import annotations

import numpy as np


def authors_mixing(vectors) -> dict:
    """Kobayashi et al. 2021's mixing of each measure's materialised v_ij [T, S, D], as their
    BertNormOutput computes it: the preserving vector is the diagonal, the mixing vector the
    row sum without it, the ratio mixing / (mixing + preserving) of their norms; [T, M]."""
    out: dict[str, list] = {"mixing_norm": [], "preserving_norm": [], "mixing_ratio": []}
    for v in vectors:
        own = np.einsum("iid->id", v)
        mix = np.linalg.norm(v.sum(1) - own, axis=-1)
        keep = np.linalg.norm(own, axis=-1)
        out["mixing_norm"].append(mix)
        out["preserving_norm"].append(keep)
        out["mixing_ratio"].append(mix / (mix + keep))
    return {name: np.stack(rows, -1) for name, rows in out.items()}
