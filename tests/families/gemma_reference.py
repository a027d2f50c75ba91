"""The eager-PyTorch reference of every Gemma 2 / Gemma 3 quantity, for ONE unpadded example.

Forward hooks on each layer's q_proj/k_proj/v_proj/o_proj and post_attention_layernorm
hand over the projections (split head-major as HF's view/transpose), the attention
output a and its post-normed N_pa(a). Gemma 3's queries and keys then pass the layer's
own q_norm/k_norm modules; both are rotated with HF's own rotary embedding (Gemma 3:
that of the layer's type) and apply_rotary_pos_emb. Attentions and hidden states are
the model's own. Then

  scores = q k^T * query_pre_attn_scalar^-1/2 per query head with its group's key,
           Gemma 2 soft-capped, cap * tanh(scores / cap); the future exactly -inf;

and the norm quantities by the docs' definition for a post-attention norm
(docs/families.md, "Gemma 2 and Gemma 3"): with s'_i = sqrt(mean(a_i^2) + eps) and
g' = 1 + w of post_attention_layernorm, head h's vector from token j at position i is
F^h_ij = (alpha^h_ij / s'_i) g' * f_h(x_j). reference.naive_norms materialises it in
float64 ([H, T, S, D]) given the weights alpha / s'_i and the output projection
g' * W_O, and checks that sum_{h,j} F^h_ij rebuilds torch's own N_pa(a_i); the next
norm is pre_feedforward_layernorm (scale 1 + w, an RMSNorm) of h = x + N_pa(a).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from reference import hooked_forward, naive_norms

NAMES = ("q", "k", "v", "o", "post")


def gemma_reference(model, enc) -> dict:
    """Every quantity of ONE unpadded example `enc`: float64 arrays without a batch axis."""
    from transformers.models.gemma2.modeling_gemma2 import apply_rotary_pos_emb

    model = getattr(model, "model", model)
    c = model.config
    gemma3 = c.model_type == "gemma3_text"
    heads, kv, k_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim

    def modules(layer):
        a = layer.self_attn
        return dict(
            zip(
                NAMES,
                (a.q_proj, a.k_proj, a.v_proj, a.o_proj, layer.post_attention_layernorm),
                strict=True,
            )
        )

    out, seen = hooked_forward(model, enc, modules)
    t = enc["input_ids"].shape[1]
    positions = torch.arange(t)[None]
    x0 = out.last_hidden_state
    with torch.no_grad():
        if gemma3:
            rope = {k: model.rotary_emb(x0, positions, k) for k in set(c.layer_types)}
        else:
            rope = {k: model.rotary_emb(x0, positions) for k in set(c.layer_types)}
    hidden = np.stack([h[0].double().numpy() for h in out.hidden_states])
    ref: dict[str, list] = {}
    group = heads // kv
    future = ~np.tril(np.ones((t, t), bool))
    for layer in range(c.num_hidden_layers):
        block = model.layers[layer]

        def split(name, n, layer=layer):  # [1, T, n K] -> [1, n, T, K]
            return seen[name][layer].view(1, t, n, k_dim).transpose(1, 2)

        q, k = split("q", heads), split("k", kv)
        if gemma3:
            with torch.no_grad():
                q, k = block.self_attn.q_norm(q), block.self_attn.k_norm(k)
        cos, sin = rope[c.layer_types[layer]]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        q, k = q[0].double().numpy(), k[0].double().numpy()
        v = split("v", kv)[0].double().numpy()
        alpha = out.attentions[layer][0].double().numpy()
        scores = q @ np.repeat(k, group, axis=0).transpose(0, 2, 1) * c.query_pre_attn_scalar**-0.5
        if not gemma3 and c.attn_logit_softcapping is not None:
            cap = c.attn_logit_softcapping
            scores = np.tanh(scores / cap) * cap
        row = dict(queries=q, keys=k, values=v, attention=alpha)
        row["scores"] = np.where(future, -np.inf, scores)
        a = seen["o"][layer][0].double().numpy()  # the attention output, before N_pa
        s_post = np.sqrt(np.square(a).mean(-1) + c.rms_norm_eps)  # s'_i
        g_post = 1.0 + block.post_attention_layernorm.weight.detach().double().numpy()
        w_o = block.self_attn.o_proj.weight.detach().double()  # [D, H K]
        per = dict(
            out=SimpleNamespace(weight=w_o * torch.from_numpy(g_post)[:, None], bias=None),
            next_ln=SimpleNamespace(weight=1.0 + block.pre_feedforward_layernorm.weight.double()),
        )
        normed = seen["post"][layer][0].double().numpy()  # torch's N_pa(a): the self-check
        norms = naive_norms(
            per,
            np.repeat(v, group, axis=0),
            alpha / s_post[None, :, None],
            hidden[layer],
            normed,
            c.rms_norm_eps,
            rms=True,
        )
        norms.pop("fx_norm")  # refused for post-norm models (no per-query divisor)
        row.update(norms)
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = hidden
    return result
