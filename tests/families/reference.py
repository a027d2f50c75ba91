"""An independent eager-PyTorch reference of every quantity, for any family.

From the torch model: attention and hidden states (output_attentions /
output_hidden_states), and forward hooks on each layer's query, key, value and
output projections. From those, NAIVELY (materialising f and alpha f, in
float64):

  f_h(x_j)           = v_h(x_j) W_O^h                      (output bias left out)
  fx_norm            = ||f_h(x_j)||
  alpha_fx_norm      = ||alpha^h_ij f_h(x_j)||
  sum_alpha_fx_norm  = ||sum_h alpha^h_ij f_h(x_j)||
  attn_res_norm      = ||sum_h alpha^h_ij f_h(x_j) + delta_ij r_j||
  attn_res_ln_norm   = ||gamma * centre(sum_h alpha^h_ij f_h(x_j) + delta_ij r_j)|| / s_i
  mixing_norm, preserving_norm, mixing_ratio: for each of the three vectors
                       v_ij above (Attn-N, AttnRes-N, AttnResLn-N), as the authors'
                       BertNormOutput: ||sum_{j != i} v_ij||, ||v_ii|| and
                       ||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||)

where r is the residual stream entering the attention block's addition (the
layer input hidden_states[l]), gamma the scale of the LayerNorm applied next to
that sum (post-LN: the block's own; pre-LN: the FFN's input norm) and s_i the
real standard deviation of r_i + attn_out_i. The reference checks itself: its
sum_j sum_h alpha f + b_O must rebuild the hooked attention output.

An ADAPTER per family names the torch modules of layer l; shared (ALBERT)
modules are hooked once and their calls taken in layer order.
"""

from __future__ import annotations

import numpy as np
from kobayashi_reference import authors_mixing


def _bert_like(layer):
    a = layer.attention
    return dict(
        query=a.self.query,
        key=a.self.key,
        value=a.self.value,
        out=a.output.dense,
        next_ln=a.output.LayerNorm,
    )


def _albert(model, layer: int):
    c = model.config
    group_index = int(layer / (c.num_hidden_layers / c.num_hidden_groups))  # HF's rule
    group = model.encoder.albert_layer_groups[group_index]
    a = group.albert_layers[0].attention
    return dict(query=a.query, key=a.key, value=a.value, out=a.dense, next_ln=a.LayerNorm)


ADAPTERS = {
    "electra": lambda model, layer: _bert_like(model.encoder.layer[layer]),
    "xlm-roberta": lambda model, layer: _bert_like(model.encoder.layer[layer]),
    "albert": _albert,
}


def torch_reference(model, family: str, enc) -> dict:
    """Every quantity for ONE unpadded example `enc`: float64 arrays without a batch axis."""
    import torch

    c = model.config
    layers, heads = c.num_hidden_layers, c.num_attention_heads
    mods = [ADAPTERS[family](model, i) for i in range(layers)]
    calls: dict[int, list] = {}
    hooks = []
    for m in {id(m): m for per in mods for k, m in per.items() if k != "next_ln"}.values():
        calls[id(m)] = []
        hooks.append(
            m.register_forward_hook(
                lambda mod, _i, out: calls[id(mod)].append(out.detach().double()[0])
            )
        )
    try:
        with torch.no_grad():
            out = model(**enc, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    used: dict[int, int] = {}

    def take(m):  # this layer's call of a (possibly shared) module
        n = used.get(id(m), 0)
        used[id(m)] = n + 1
        return calls[id(m)][n].numpy()

    ref: dict[str, list] = {}
    for layer, per in enumerate(mods):
        q, k, v, attn_out = (take(per[n]) for n in ("query", "key", "value", "out"))
        t = q.shape[0]
        split = {
            n: a.reshape(t, heads, -1).transpose(1, 0, 2)
            for n, a in (("queries", q), ("keys", k), ("values", v))
        }
        alpha = out.attentions[layer][0].double().numpy()
        x = out.hidden_states[layer][0].double().numpy()
        row = dict(split, attention=alpha)
        row["scores"] = (
            split["queries"] @ split["keys"].transpose(0, 2, 1) / np.sqrt(q.shape[1] // heads)
        )
        row.update(naive_norms(per, split["values"], alpha, x, attn_out, c.layer_norm_eps))
        for name, value in row.items():
            ref.setdefault(name, []).append(value)
    result = {name: np.stack(v) for name, v in ref.items()}
    result["hidden_states"] = np.stack([h[0].double().numpy() for h in out.hidden_states])
    return result


def hooked_forward(model, enc, modules_of, layers=None) -> tuple:
    """(the outputs of `model`'s forward of `enc`, attentions and hidden states with
    them; {name: [its output at each layer]}) with a forward hook on the modules
    `modules_of(layer)` names, {name: module}, of each of `layers` (None: model.layers;
    GPT-2's are model.h), removed after."""
    import torch

    seen: dict[str, list] = {}
    hooks = []
    for layer in model.layers if layers is None else layers:
        for name, module in modules_of(layer).items():
            seen.setdefault(name, [])
            hook = module.register_forward_hook(lambda _m, _i, o, n=name: seen[n].append(o))
            hooks.append(hook)
    try:
        with torch.no_grad():
            out = model(**enc, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return out, seen


def naive_norms(per: dict, values, alpha, x, attn_out, eps: float, rms: bool = False) -> dict:
    """The norm quantities of one layer, materialising f ([S, H, D]) and alpha f ([H, T, S, D]).

    rms: the next norm is an RMSNorm (Llama): s_i = sqrt(mean(y_i^2) + eps), no centring.
    """
    heads, t, kd = values.shape
    w_o = per["out"].weight.detach().double().numpy().T  # [H*K, D]
    b_o = per["out"].bias.detach().double().numpy() if per["out"].bias is not None else 0.0
    f = np.stack([values[h] @ w_o[h * kd : (h + 1) * kd] for h in range(heads)], 1)  # [S, H, D]
    weighted = alpha[:, :, :, None] * f.transpose(1, 0, 2)[:, None]  # [H, T, S, D]
    mixed = weighted.sum(0)  # [T, S, D]
    # self-check against torch's float32 attention output: a few float32 roundings apart
    np.testing.assert_allclose(mixed.sum(1) + b_o, attn_out, rtol=2e-6, atol=1e-6)
    with_res = mixed + np.eye(t)[:, :, None] * x[None, :, :]
    y = x + attn_out
    std = np.sqrt((np.square(y).mean(-1) if rms else y.var(-1)) + eps)
    gamma = per["next_ln"].weight.detach().double().numpy()
    centred = with_res if rms else with_res - with_res.mean(-1, keepdims=True)
    through_ln = gamma * centred / std[:, None, None]
    return {
        **authors_mixing((mixed, with_res, through_ln)),
        "fx_norm": np.linalg.norm(f, axis=-1).T,
        "alpha_fx_norm": np.linalg.norm(weighted, axis=-1),
        "sum_alpha_fx_norm": np.linalg.norm(mixed, axis=-1),
        "attn_res_norm": np.linalg.norm(with_res, axis=-1),
        "attn_res_ln_norm": np.linalg.norm(gamma * centred, axis=-1) / std[:, None],
    }


def assert_matches(cap, ref: dict, names, label: str) -> None:
    """Every quantity in `names` of a Capture equals the reference: attention within 1e-5,
    the rest within 1e-4 x max(1, max |reference|) (the issue's tolerances)."""
    for name in names:
        got, want = getattr(cap, name), ref[name]
        assert got.shape == want.shape, (name, label)
        scale = 1.0 if name == "attention" else max(1.0, float(np.abs(want).max()))
        tol = 1e-5 if name == "attention" else 1e-4 * scale
        np.testing.assert_allclose(got, want, atol=tol, rtol=0, err_msg=f"{name} of {label}")


def assert_decoder_statistics(cap, layers: int, heads: int) -> None:
    """A decoder capture's decoder_head_stats and decoder_norm_head_stats [L, H, P] equal
    numpy's statistics (`jaxattn.analysis.decoder_head_statistics`) over its own maps
    (attention, and alpha_fx_norm with each row normalised), per query head."""
    from jaxattn.analysis import decoder_head_statistics
    from jaxattn.analysis.weights import normalise_rows
    from jaxattn.quantities import DECODER_HEAD_STATS

    for name, weights in (
        ("decoder_head_stats", cap.attention),
        ("decoder_norm_head_stats", normalise_rows(cap.alpha_fx_norm)),
    ):
        stats = decoder_head_statistics(weights, cap.tokens)
        want = np.stack([stats[k] for k in DECODER_HEAD_STATS], -1)
        assert getattr(cap, name).shape == want.shape == (layers, heads, len(DECODER_HEAD_STATS))
        np.testing.assert_allclose(getattr(cap, name), want, atol=2e-6, rtol=0, err_msg=name)
