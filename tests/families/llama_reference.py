"""The eager-PyTorch reference of every Llama quantity, for ONE unpadded example.

Forward hooks on each layer's q_proj/k_proj/v_proj hand over the projections
(split head-major as HF's view/transpose: H query heads, H_kv key/value heads),
o_proj the attention block's output; q and k are rotated with HF's own
LlamaRotaryEmbedding and apply_rotary_pos_emb (after Qwen3's q_norm/k_norm,
where the attention has them: Mistral, Qwen2 and Qwen3 use the same hooks).
Attentions and hidden states
are the model's own (output_attentions / output_hidden_states). Then
scores = q k^T K^-0.5 per query head with its group's key (HF repeat_kv), the
future exactly -inf (a sliding window's older keys keep their score), and the
norm quantities come from reference.naive_norms
(float64, materialised, each query head with its group's values) with
r = hidden_states[l] and the next norm the layer's post_attention_layernorm
(an RMSNorm: no centring).
"""

from __future__ import annotations

import numpy as np
import torch
from reference import hooked_forward, naive_norms


def base_model(model):
    """The LlamaModel inside LlamaForCausalLM (or the model itself)."""
    return getattr(model, "model", model)


def llama_reference(model, enc) -> dict:
    """Every quantity of ONE unpadded example `enc`: float64 arrays without a batch axis."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = base_model(model)
    c = model.config
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    k_dim = model.layers[0].self_attn.head_dim  # Qwen2Config has no head_dim: D / H
    out, seen = hooked_forward(
        model,
        enc,
        lambda layer: {
            "q": layer.self_attn.q_proj,
            "k": layer.self_attn.k_proj,
            "v": layer.self_attn.v_proj,
            "o": layer.self_attn.o_proj,
        },
    )
    t = enc["input_ids"].shape[1]
    with torch.no_grad():
        cos, sin = model.rotary_emb(out.last_hidden_state, torch.arange(t)[None])
    hidden = np.stack([h[0].double().numpy() for h in out.hidden_states])
    ref: dict[str, list] = {}
    group = heads // kv
    for layer in range(c.num_hidden_layers):

        def split(name, n, layer=layer):  # [1, T, n K] -> [1, n, T, K]
            return seen[name][layer].view(1, t, n, k_dim).transpose(1, 2)

        q, k = split("q", heads), split("k", kv)
        a = model.layers[layer].self_attn
        if hasattr(a, "q_norm"):  # Qwen3: each head's RMSNorm over head_dim, before RoPE
            with torch.no_grad():
                q, k = a.q_norm(q), a.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        q, k = q[0].double().numpy(), k[0].double().numpy()
        v = split("v", kv)[0].double().numpy()
        alpha = out.attentions[layer][0].double().numpy()
        scores = q @ np.repeat(k, group, axis=0).transpose(0, 2, 1) * k_dim**-0.5
        future = ~np.tril(np.ones((t, t), bool))
        row = dict(queries=q, keys=k, values=v, attention=alpha)
        row["scores"] = np.where(future, -np.inf, scores)
        block = model.layers[layer]
        per = dict(out=block.self_attn.o_proj, next_ln=block.post_attention_layernorm)
        attn_out = seen["o"][layer][0].double().numpy()
        v_per_head = np.repeat(v, group, axis=0)
        row.update(
            naive_norms(per, v_per_head, alpha, hidden[layer], attn_out, c.rms_norm_eps, rms=True)
        )
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = hidden
    return result
