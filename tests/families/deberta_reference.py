"""The eager-PyTorch reference of every DeBERTa-v2 quantity, score terms included.

reference.torch_reference gives attention, q/k/v, hidden states and the naive
float64 norm quantities (through the adapter registered here). DeBERTa's
scores are not q.k/sqrt(K), so they come from the model itself: `scores` is
the real input of each layer's softmax (recorded while the model runs), and
each term is HF's own code: c2c as DisentangledSelfAttention.forward computes
it, c2p and p2c from its disentangled_attention_bias with that one
pos_att_type at the layer's full scale factor.
"""

from __future__ import annotations

import numpy as np
import reference
import torch


def _modules(model, layer: int) -> dict:
    a = model.encoder.layer[layer].attention
    return dict(
        query=a.self.query_proj,
        key=a.self.key_proj,
        value=a.self.value_proj,
        out=a.output.dense,
        next_ln=a.output.LayerNorm,
    )


reference.ADAPTERS["deberta-v2"] = _modules


def base_model(model):
    """The DebertaV2Model inside a task model (or the model itself)."""
    return getattr(model, "deberta", model)


def deberta_reference(model, enc, monkeypatch) -> dict:
    """Every quantity of ONE unpadded example: float64 arrays, no batch axis.

    Adds to reference.torch_reference's dict `scores` (the softmax inputs) and
    `scores_c2c`, `scores_c2p`, `scores_p2c` (those the config has), [L, H, T, T].
    """
    model = base_model(model)
    seen: list = []
    softmax = torch.nn.functional.softmax

    def recording(scores, dim):
        seen.append(scores.detach().double()[0].numpy())
        return softmax(scores, dim=dim)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "softmax", recording)
        ref = reference.torch_reference(model, "deberta-v2", enc)
    layers = model.config.num_hidden_layers
    assert len(seen) == layers  # one softmax per layer, in order
    ref["scores"] = np.stack(seen)
    for name, terms in _terms(model, enc).items():
        ref[f"scores_{name}"] = terms
    return ref


def _terms(model, enc) -> dict:
    """HF's score terms of every layer, each computed alone: name -> [L, H, T, T]."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import scaled_size_sqrt

    with torch.no_grad():
        states = model(**enc, output_hidden_states=True).hidden_states
        table = model.encoder.get_rel_embedding()
        out: dict[str, list] = {}
        for layer in range(model.config.num_hidden_layers):
            att = model.encoder.layer[layer].attention.self
            heads, types = att.num_attention_heads, list(att.pos_att_type)
            x = states[layer]
            q = att.transpose_for_scores(att.query_proj(x), heads)
            k = att.transpose_for_scores(att.key_proj(x), heads)
            factor = 1 + sum(t in types for t in ("c2p", "p2c"))
            terms = {"c2c": torch.bmm(q, k.transpose(-1, -2) / scaled_size_sqrt(q, factor))}
            try:
                for term in types:
                    att.pos_att_type = [term]
                    terms[term] = att.disentangled_attention_bias(q, k, None, table, factor)
            finally:
                att.pos_att_type = types
            for name, t in terms.items():
                out.setdefault(name, []).append(t.double().numpy())
    return {name: np.stack(ts) for name, ts in out.items()}
