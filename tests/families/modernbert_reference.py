"""The eager-PyTorch reference of every ModernBERT quantity, for ONE unpadded example.

ModernBERT's queries and keys are not the output of a Linear (they come out of
the fused Wqkv and are then rotated), so the generic reference.torch_reference
does not fit. Here the model itself hands them over: HF's
eager_attention_forward is wrapped while the model runs and records the
(rotated) query, key and value states it receives and the attention weights it
returns; forward hooks on each attn.Wo give the attention block's output. Then
scores = q' k'^T * K^-0.5 (before the padding/window mask, as jaxattn captures
them) and the norm quantities come from reference.naive_norms (float64,
materialised), with r = hidden_states[l] (the layer's input, the residual the
attention output is added to: pre-LN adds it un-normalised) and the next
LayerNorm = the layer's mlp_norm (pre-LN: the LayerNorm applied next to h).
"""

from __future__ import annotations

import numpy as np
import torch
from reference import naive_norms
from transformers.models.modernbert import modeling_modernbert as hf


def base_model(model):
    """The ModernBertModel inside a task model (or the model itself)."""
    return getattr(model, "model", model)


def modules(model, layer: int) -> dict:
    """The torch modules naive_norms needs for layer `layer`."""
    block = base_model(model).layers[layer]
    return dict(out=block.attn.Wo, next_ln=block.mlp_norm)


def modernbert_reference(model, enc, monkeypatch) -> dict:
    """Every quantity of ONE unpadded example `enc`: float64 arrays without a batch axis."""
    model = base_model(model)
    c = model.config
    seen: list[dict] = []
    eager = hf.eager_attention_forward

    def recording(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
        out, weights = eager(module, query, key, value, attention_mask, scaling, dropout, **kw)
        states = dict(queries=query, keys=key, values=value, attention=weights)
        seen.append({n: t.detach().double()[0].numpy() for n, t in states.items()})
        seen[-1]["scaling"] = scaling
        return out, weights

    outs: list = []

    def record_out(_module, _inputs, out):
        outs.append(out.detach().double()[0].numpy())

    hooks = [block.attn.Wo.register_forward_hook(record_out) for block in model.layers]
    try:
        with monkeypatch.context() as patch, torch.no_grad():
            patch.setattr(hf, "eager_attention_forward", recording)
            out = model(**enc, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) == len(outs) == c.num_hidden_layers  # one call per layer, in order
    hidden = np.stack([h[0].double().numpy() for h in out.hidden_states])
    ref: dict[str, list] = {}
    for layer, rec in enumerate(seen):
        np.testing.assert_array_equal(rec["attention"], out.attentions[layer][0].double().numpy())
        head_dim = rec["queries"].shape[-1]
        assert rec["scaling"] == head_dim**-0.5
        row = {n: rec[n] for n in ("queries", "keys", "values", "attention")}  # [H, T, K|S]
        row["scores"] = rec["queries"] @ rec["keys"].transpose(0, 2, 1) * head_dim**-0.5
        row.update(
            naive_norms(
                modules(model, layer),
                rec["values"],
                rec["attention"],
                hidden[layer],
                outs[layer],
                c.norm_eps,
            )
        )
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = hidden
    return result
