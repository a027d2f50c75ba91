"""Final hidden states and the masked-LM loss through the checkpoint's own MLM head.

What head ablation (`jaxattn.engine.ablation`) measures a change of.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxattn.engine.tokenize import TokenizedText
from jaxattn.errors import CheckpointError


def final_states_spec(engine):
    """The spec `final_states` runs: the last layer's hidden states (what a generation
    step computes: a server warms it up, `Engine.generation_spec`)."""
    return engine.make_spec("hidden_states", layers=engine.config.num_layers - 1)


def final_states(engine, tokenized: Sequence[TokenizedText], ablation) -> list[np.ndarray]:
    """The last layer's output [T, D] of each example, in input order (ablation or None)."""
    spec = final_states_spec(engine)
    out: list = [None] * len(tokenized)
    for pos, cap in engine.run(tokenized, spec, ablation):
        out[pos] = cap.hidden_states[-1]  # [T, D]
    return out


class MaskedLM:
    """Fixed masked copies of a corpus and the loss of predicting the masked tokens.

    HF's heads: BERT cls.predictions (dense, hidden_act, LayerNorm, tied decoder
    + bias), RoBERTa lm_head (dense, exact gelu, layer_norm, tied decoder +
    bias), DistilBERT vocab_transform/vocab_layer_norm/vocab_projector.
    """

    def __init__(self, engine, tokenized, *, mask_rate: float, seed: int):
        mask_id = engine.tokenizer.hf.mask_token_id
        if mask_id is None:
            raise CheckpointError("the tokenizer has no mask token: no masked-LM loss")
        specials = set(engine.tokenizer.hf.all_special_ids)
        rng = np.random.default_rng(seed)
        self.engine = engine
        self.masked: list[TokenizedText] = []
        self.targets: list[tuple[np.ndarray, np.ndarray]] = []
        for e in tokenized:
            cand = np.array([i for i, t in enumerate(e.ids) if t not in specials], int)
            if not len(cand):
                continue
            n = max(1, round(mask_rate * len(cand)))
            pos = np.sort(rng.choice(cand, size=n, replace=False))
            ids = np.array(e.ids)
            self.targets.append((pos, ids[pos].copy()))
            ids[pos] = mask_id
            self.masked.append(dataclasses.replace(e, ids=tuple(int(i) for i in ids)))

    def loss(self, ablation) -> float:
        """Mean cross-entropy (nats) over every masked position of the corpus."""
        states = final_states(self.engine, self.masked, ablation)
        total, count = 0.0, 0
        for h, (pos, target) in zip(states, self.targets, strict=True):
            logits = self.logits(h[pos])  # [P, V]
            logits = logits - logits.max(-1, keepdims=True)
            logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            total -= float(logp[np.arange(len(pos)), target].sum())
            count += len(pos)
        return total / max(count, 1)

    def logits(self, h: np.ndarray) -> np.ndarray:
        """The MLM head on final hidden states [P, D] -> [P, V] (float64)."""
        p = self.engine.extra_params["mlm_head"]
        c = self.engine.config
        h = h.astype(np.float64) @ p["dense"]["kernel"] + p["dense"]["bias"]
        # jaxattn 0.2's native RoBERTa checkpoints predate head_activation (always gelu).
        legacy = "gelu" if c.family == "roberta" else c.activation
        h = _activation(h, c.head_activation or legacy)
        mean = h.mean(-1, keepdims=True)
        var = np.square(h - mean).mean(-1, keepdims=True)
        h = (h - mean) / np.sqrt(var + c.layer_norm_eps) * p["ln"]["scale"] + p["ln"]["bias"]
        words = np.asarray(self.engine.word_embedding(), np.float64)
        return h @ words.T + p["decoder_bias"]


def _activation(x: np.ndarray, name: str) -> np.ndarray:
    if name == "relu":
        return np.maximum(x, 0)
    if name == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
