"""Head ablation (Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", sec. 5; Michel et al.
2019 for zeroed heads): run the model with chosen heads disabled and measure how
much its final representations and masked-LM loss (an encoder) or causal LM loss
(a decoder: `jaxattn.engine.causal_lm`) change.

A head is disabled in one of two ways:
* "zero": its output is zeroed (its context vectors contribute nothing to W_O;
  the output bias stays): TransformerLens's zero-ablation of ``hook_z``;
* "uniform": its attention is replaced by the uniform distribution over the
  example's real tokens (a decoder's query i: over the keys j <= i it may see).
Mean ablation (``hook_z`` replaced by its mean over a reference corpus, as in
ARENA and Wang et al. 2022) is not offered.
The gates are runtime arrays, so every ablation set runs one compiled program, and
the study's unablated base runs it too (gates all open).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from jaxattn.config import ModelConfig
from jaxattn.engine.mlm import MaskedLM, final_states
from jaxattn.errors import UsageError

MODES = ("zero", "uniform")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeadAblation:
    """Heads to disable, as (layer, head) pairs, 0-indexed."""

    zero: frozenset[tuple[int, int]] = frozenset()
    uniform: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of(cls, heads: Iterable[tuple[int, int]], mode: str = "zero") -> HeadAblation:
        if mode not in MODES:
            raise UsageError(f"unknown ablation mode {mode!r}: valid are {', '.join(MODES)}")
        pairs = []
        for pair in heads:
            try:
                layer, h = pair
                pairs.append((operator.index(layer), operator.index(h)))
            except (TypeError, ValueError):
                raise UsageError(
                    f"ablation head {pair!r} is not a (layer, head) pair of whole numbers"
                ) from None
        return cls(**{mode: frozenset(pairs)})

    def gates(self, config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
        """(keep [L, H] float32, uniform [L, H] bool) for the model.

        Raises:
          UsageError: a (layer, head) out of the model's range.
        """
        keep = np.ones((config.num_layers, config.num_heads), np.float32)
        uniform = np.zeros((config.num_layers, config.num_heads), bool)
        for name, heads in (("zero", self.zero), ("uniform", self.uniform)):
            for layer, head in heads:
                if not (0 <= layer < config.num_layers and 0 <= head < config.num_heads):
                    raise UsageError(
                        f"ablation {name} head ({layer}, {head}) is out of range: layers "
                        f"0..{config.num_layers - 1}, heads 0..{config.num_heads - 1}"
                    )
                if name == "zero":
                    keep[layer, head] = 0.0
                else:
                    uniform[layer, head] = True
        return keep, uniform


def _cosines(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float]:
    """Mean over examples of cos([CLS]) and cos(mean-pooled output)."""

    def cos(x, y):
        return float(x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-30))

    cls = [cos(x[0], y[0]) for x, y in zip(a, b, strict=True)]
    pooled = [cos(x.mean(0), y.mean(0)) for x, y in zip(a, b, strict=True)]
    return float(np.mean(cls)), float(np.mean(pooled))


def head_ablation_study(
    engine,
    texts: Sequence,
    *,
    heads: Iterable[tuple[int, int]] | None = None,
    mode: str = "zero",
    mlm: bool = True,
    mask_rate: float = 0.15,
    seed: int = 0,
    too_long: str = "error",
    progress: Callable[[], None] | None = None,
) -> dict:
    """Ablate each head alone and report how the outputs change, over a corpus.

    Kovaleva et al. 2019 disable one head at a time; here, per head: the mean
    cosine between the final [CLS] vectors with and without the head
    (``cos_cls``), the same for mean-pooled final vectors (``cos_mean``), and,
    when the checkpoint has a masked-LM head, the change in masked-LM loss
    (``mlm_loss_delta``; the loss is the mean cross-entropy over a fixed random
    ``mask_rate`` of each example's non-special tokens, at least one). On a
    decoder (``causal``) with its next-token head, the change in the causal LM
    loss instead (``lm_loss_delta``: the mean next-token cross-entropy over every
    position of every example, `jaxattn.engine.causal_lm.CausalLM`); ``cos_cls``
    is then the first token's final vector.

    Args:
      engine: a loaded `Engine`.
      texts: strings or (a, b) pairs.
      heads: (layer, head) pairs to ablate one at a time; default every head.
      mode: "zero" or "uniform".
      mlm: also measure the masked-LM (encoder) or causal LM (decoder) loss when
        the model has the head.
      too_long: texts over the model's limit: "error", "truncate" or "skip".
      progress: called with no argument once each head is done (a progress bar's tick).

    Returns:
      {"mode", "heads": [[l, h], ...], "cos_cls": [...], "cos_mean": [...],
        "mlm_loss": base loss or None, "mlm_loss_delta": [...] or None,
        "causal": bool, "lm_loss": base loss or None, "lm_loss_delta": [...] or None,
        "examples": N}

    Raises:
      UsageError: no texts, or every one skipped as too long (too_long="skip"); bad
        heads or mode.
    """
    c = engine.config
    heads = (
        list(heads)
        if heads is not None
        else [(layer, h) for layer in range(c.num_layers) for h in range(c.num_heads)]
    )
    HeadAblation.of(heads, mode)  # each a (layer, head) pair (heads=(0, 1): a TypeError)
    # Here, not at the top: importing this module (its MODES) must not start jax.
    from jaxattn.engine.causal_lm import CausalLM, has_lm_head

    tokenized = [t for t in engine.tokenize(texts, too_long=too_long) if t is not None]
    if not tokenized:  # every number below would be a mean of nothing (NaN)
        raise UsageError(
            "no text to ablate over: give at least one"
            if not texts
            else "every text was skipped as too long: nothing to ablate over"
        )
    # The unablated run through the ablated runs' program (gates all open: every
    # weight kept, none uniform), not a program of its own.
    none = HeadAblation()
    base = final_states(engine, tokenized, none)
    use_mlm = mlm and not c.causal and "mlm_head" in engine.extra_params and bool(tokenized)
    use_lm = mlm and has_lm_head(engine) and bool(tokenized)
    if use_mlm:
        lm = MaskedLM(engine, tokenized, mask_rate=mask_rate, seed=seed)
        base_loss = lm.loss(none)
    if use_lm:
        causal = CausalLM(engine, tokenized)
        base_lm = causal.loss(none, base)
    out = {
        "mode": mode,
        "heads": [list(h) for h in heads],
        "cos_cls": [],
        "cos_mean": [],
        "mlm_loss": base_loss if use_mlm else None,
        "mlm_loss_delta": [] if use_mlm else None,
        "causal": c.causal,
        "lm_loss": base_lm if use_lm else None,
        "lm_loss_delta": [] if use_lm else None,
        "examples": len(tokenized),
    }
    for head in heads:
        ablation = HeadAblation.of([head], mode)
        states = final_states(engine, tokenized, ablation)
        cls, pooled = _cosines(base, states)
        out["cos_cls"].append(cls)
        out["cos_mean"].append(pooled)
        if use_mlm:
            out["mlm_loss_delta"].append(lm.loss(ablation) - base_loss)
        if use_lm:
            out["lm_loss_delta"].append(causal.loss(ablation, states) - base_lm)
        if progress is not None:
            progress()
    return out
