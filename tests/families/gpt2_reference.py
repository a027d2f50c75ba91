"""The eager-PyTorch reference of every GPT-2 quantity, for ONE unpadded example.

GPT-2's projections are Conv1D (x W + b, W [in, out]) and one c_attn gives
query, key and value as its column thirds, so the generic reference's Linear
hooks do not fit. Here forward hooks on each block's attn.c_attn hand over
q, k, v (split head-major as HF's view/transpose), attn.c_proj the attention
block's output, and the model's own attentions and hidden states come out of
output_attentions / output_hidden_states. Then scores = q k^T K^-0.5 with the
future exactly -inf, and the norm quantities come from reference.naive_norms
(float64, materialised) with r = hidden_states[l] (the layer's input: pre-LN
adds it un-normalised) and the next LayerNorm = the block's ln_2.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from reference import hooked_forward, naive_norms


def base_model(model):
    """The GPT2Model inside GPT2LMHeadModel (or the model itself)."""
    return getattr(model, "transformer", model)


def _as_linear(conv):
    """A Conv1D as naive_norms reads a Linear: weight [out, in], bias."""
    return SimpleNamespace(weight=conv.weight.detach().T, bias=conv.bias.detach())


def gpt2_reference(model, enc) -> dict:
    """Every quantity of ONE unpadded example `enc`: float64 arrays without a batch axis."""
    model = base_model(model)
    c = model.config
    heads, d = c.n_head, c.n_embd
    out, seen = hooked_forward(
        model, enc, lambda block: {"qkv": block.attn.c_attn, "o": block.attn.c_proj}, model.h
    )
    qkv, outs = seen["qkv"], seen["o"]
    assert len(qkv) == len(outs) == c.n_layer
    hidden = np.stack([h[0].double().numpy() for h in out.hidden_states])
    ref: dict[str, list] = {}
    for layer in range(c.n_layer):
        fused = qkv[layer][0].double().numpy()  # [T, 3D]
        t = fused.shape[0]
        q, k, v = (
            fused[:, i * d : (i + 1) * d].reshape(t, heads, -1).transpose(1, 0, 2) for i in range(3)
        )
        alpha = out.attentions[layer][0].double().numpy()
        scores = q @ k.transpose(0, 2, 1) * q.shape[-1] ** -0.5
        future = ~np.tril(np.ones((t, t), bool))
        row = dict(queries=q, keys=k, values=v, attention=alpha)
        row["scores"] = np.where(future, -np.inf, scores)
        block = model.h[layer]
        per = dict(out=_as_linear(block.attn.c_proj), next_ln=block.ln_2)
        attn_out = outs[layer][0].double().numpy()
        row.update(naive_norms(per, v, alpha, hidden[layer], attn_out, c.layer_norm_epsilon))
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = hidden
    return result
