"""The causal LM loss through a decoder's own next-token head (GPT-2, Llama, Gemma).

What head ablation (`jaxattn.engine.ablation`) measures a change of on a decoder,
as the masked-LM loss (`jaxattn.engine.mlm`) is on an encoder. The last hidden
state the engine returns is already after the final norm (GPT-2's ln_f, Llama's
norm: `Encoder` applies it, as HF's hidden_states[-1]), so the logits are
``h W_U^T`` with W_U [V, D] the word embedding (``ModelConfig.tied_lm_head``) or
the checkpoint's untied ``lm_head.weight`` (``engine.extra_params["lm_head"]``),
no bias (no family has one); Gemma 2 soft-caps the logits
(``ModelConfig.lm_softcap``, its final_logit_softcapping).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.engine.mlm import final_states
from jaxattn.engine.tokenize import TokenizedText


def unembedding(engine):
    """The [V, D] next-token head of a causal engine, or None when it has none."""
    if not engine.config.causal:
        return None
    if engine.config.tied_lm_head:
        return engine.word_embedding()
    head = engine.extra_params.get("lm_head")
    return None if head is None else np.asarray(head["unembedding"])


def has_lm_head(engine) -> bool:
    """Whether the causal LM loss can be computed: a decoder with its next-token head."""
    c = engine.config
    return bool(c.causal and (c.tied_lm_head or "lm_head" in engine.extra_params))


def logits(h, w, softcap: float = 0.0):
    """The next-token logits h W^T of rows h [P, D] through the head w [V, D] -> [P, V],
    soft-capped, cap * tanh(logits / cap), when softcap > 0 (Gemma 2), as transformers
    computes them (for the loss here and the argmax of a generation step)."""
    out = jnp.einsum("pd,vd->pv", h, w, precision=jax.lax.Precision.HIGHEST)
    if softcap:
        out = softcap * jnp.tanh(out / softcap)
    return out


# Rows of next-token predictions per `_nll_sum` call: the corpus's predictions run in
# chunks of this many (the last one padded), so one compiled program serves every
# example length (a program per length took most of a tiny decoder's --ablate time).
CHUNK_ROWS = 256


@functools.partial(jax.jit, static_argnums=4)
def _nll_sum(h, w, targets, valid, softcap: float = 0.0):
    """Sum over the valid rows of -log softmax(h W^T)[target]: h [P, D], w [V, D],
    targets [P], valid [P] bool (`logits`, soft-capped where the model says)."""
    logits_ = logits(h, w, softcap)
    logz = jax.nn.logsumexp(logits_, axis=-1)
    picked = jnp.take_along_axis(logits_, targets[:, None], axis=-1)[:, 0]
    return jnp.sum(jnp.where(valid, logz - picked, 0.0))


class CausalLM:
    """The mean next-token cross-entropy of a corpus through the model's LM head.

    Every position i < T-1 of every example predicts token i+1 (HF's
    ``labels=input_ids`` loss: the logits shifted by one), so an example of T
    tokens gives T-1 predictions; the loss is their mean over the corpus (each
    prediction counts once, as HF's loss of one batch without padding). Examples
    of one token predict nothing and are left out.
    """

    def __init__(self, engine, tokenized: Sequence[TokenizedText]):
        w = unembedding(engine)
        if w is None:
            raise RuntimeError(  # ablation builds one only where has_lm_head
                f"{engine.config.name} has no next-token head (a decoder whose checkpoint "
                "has lm_head.weight or ties it to the word embedding): no causal LM loss"
            )
        self.engine = engine
        self.w = jnp.asarray(w, jnp.float32)
        self.examples = list(tokenized)
        self.predictions = sum(max(e.length - 1, 0) for e in self.examples)

    def loss(self, ablation, states: Sequence[np.ndarray] | None = None) -> float:
        """Mean cross-entropy (nats) over every next-token prediction of the corpus (NaN
        when it has none). states: the examples' final hidden states [T, D] under
        `ablation` when the caller has them (`final_states`), else they are computed."""
        if not self.predictions:
            return float("nan")
        if states is None:
            states = final_states(self.engine, self.examples, ablation)
        pairs = [(h[:-1], e.ids[1:]) for h, e in zip(states, self.examples, strict=True)]
        rows = np.concatenate([h for h, _ in pairs]).astype(np.float32)  # [N, D]
        targets = np.concatenate([np.asarray(t, np.int32) for _, t in pairs])
        n = len(targets)
        pad = -n % CHUNK_ROWS
        rows = np.pad(rows, ((0, pad), (0, 0)))
        targets = np.pad(targets, (0, pad))
        valid = np.arange(n + pad) < n
        total = 0.0
        for k in range(0, n + pad, CHUNK_ROWS):
            part = slice(k, k + CHUNK_ROWS)
            total += float(
                _nll_sum(
                    rows[part], self.w, targets[part], valid[part], self.engine.config.lm_softcap
                )
            )
        return total / self.predictions
