"""The eager-PyTorch reference of every GPT-NeoX quantity, for ONE unpadded example.

A forward hook on each layer's attention.query_key_value hands over the fused
projection, split as HF's own forward splits it (view(1, T, H, 3K), transpose,
chunk(3): per head, not in thirds); q and k are rotated with HF's own
GPTNeoXRotaryEmbedding and apply_rotary_pos_emb (the partial rotation), the hook
on attention.dense gives the attention block's output. Attentions and hidden
states are the model's own (output_attentions / output_hidden_states). Then
scores = q k^T K^-0.5, the future exactly -inf, and the norm quantities come from
reference.naive_norms (float64, materialised) with r = hidden_states[l] and, for
the sequential layers, the next norm post_attention_layernorm applied to
r + attention output (a parallel layer's AttnResLn-N and mixing quantities are
refused by the engine, and not compared).
"""

from __future__ import annotations

import numpy as np
import torch
from reference import hooked_forward, naive_norms


def base_model(model):
    """The GPTNeoXModel inside GPTNeoXForCausalLM (or the model itself)."""
    return getattr(model, "gpt_neox", model)


def gpt_neox_reference(model, enc) -> dict:
    """Every quantity of ONE unpadded example `enc`: float64 arrays without a batch axis."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    model = base_model(model)
    c = model.config
    heads = c.num_attention_heads
    k_dim = c.hidden_size // heads
    out, seen = hooked_forward(
        model,
        enc,
        lambda layer: {"qkv": layer.attention.query_key_value, "o": layer.attention.dense},
    )
    t = enc["input_ids"].shape[1]
    with torch.no_grad():
        cos, sin = model.rotary_emb(out.last_hidden_state, torch.arange(t)[None])
    hidden = np.stack([h[0].double().numpy() for h in out.hidden_states])
    ref: dict[str, list] = {}
    for layer in range(c.num_hidden_layers):
        qkv = seen["qkv"][layer].view(1, t, heads, 3 * k_dim).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        q, k, v = (a[0].double().numpy() for a in (q, k, v))
        alpha = out.attentions[layer][0].double().numpy()
        future = ~np.tril(np.ones((t, t), bool))
        row = dict(queries=q, keys=k, values=v, attention=alpha)
        row["scores"] = np.where(future, -np.inf, q @ k.transpose(0, 2, 1) * k_dim**-0.5)
        block = model.layers[layer]
        per = dict(out=block.attention.dense, next_ln=block.post_attention_layernorm)
        attn_out = seen["o"][layer][0].double().numpy()
        row.update(naive_norms(per, v, alpha, hidden[layer], attn_out, c.layer_norm_eps))
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = hidden
    return result
