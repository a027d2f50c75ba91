"""The causal LM loss of a decoder and its change under head ablation, against transformers.

The loss is compared with GPT2LMHeadModel / LlamaForCausalLM / Gemma2ForCausalLM /
GPTNeoXForCausalLM's own ``labels=`` loss
(built locally from the tiny random configs, eager attention); zeroing a head is
compared with the torch model whose o_proj / c_proj input has that head's K
columns zeroed by a forward pre-hook (what zeroing the head's output means).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gemma_fixture import make_gemma_checkpoint  # noqa: E402
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from gpt_neox_fixture import make_gpt_neox_checkpoint  # noqa: E402
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.engine.ablation import head_ablation_study
from jaxattn.engine.causal_lm import CausalLM, has_lm_head

TEXTS = [EXAMPLE_A, "Hello, world. Hello, world.", EXAMPLE_B, "a"]
MAKERS = {
    "gpt2": lambda d: make_gpt2_checkpoint(d),
    "llama": lambda d: make_llama_checkpoint(d),  # an untied lm_head.weight
    "llama_tied": lambda d: make_llama_checkpoint(d, seed=3, tie_word_embeddings=True),
    # Tied, its logits soft-capped at 2 (final_logit_softcapping; the cap bites here).
    "gemma2": lambda d: make_gemma_checkpoint("gemma2", d, final_logit_softcapping=2.0),
    # Pythia's untied embed_out, a parallel residual, partial rotary.
    "gpt_neox": lambda d: make_gpt_neox_checkpoint(d),
}
UNTIED = ("llama", "gpt_neox")


@pytest.fixture(scope="module", params=sorted(MAKERS))
def model(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = MAKERS[request.param](tmp_path_factory.mktemp(request.param))
    engine = jaxattn.load(path, buckets=(32,))
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    return request.param, engine, torch_model


def _torch_loss(torch_model, engine, texts, hook=None):
    """The corpus mean of torch's per-text labels= loss, weighted by its T-1 predictions."""
    total, count = 0.0, 0
    handle = None
    if hook is not None:
        module, fn = hook
        handle = module.register_forward_pre_hook(fn)
    try:
        for e in engine.tokenize(texts):
            if e.length < 2:
                continue
            ids = torch.tensor([e.ids])
            with torch.no_grad():
                loss = torch_model(input_ids=ids, labels=ids).loss
            total += float(loss.double()) * (e.length - 1)
            count += e.length - 1
    finally:
        if handle is not None:
            handle.remove()
    return total / count


def _out_projection(name, torch_model, layer):
    if name == "gpt2":
        return torch_model.transformer.h[layer].attn.c_proj
    if name == "gpt_neox":
        return torch_model.gpt_neox.layers[layer].attention.dense
    return torch_model.model.layers[layer].self_attn.o_proj


def test_the_loss_is_transformers_labels_loss(model):
    name, engine, torch_model = model
    assert has_lm_head(engine)
    assert ("lm_head" in engine.extra_params) == (name in UNTIED)
    assert engine.config.tied_lm_head == (name not in UNTIED)
    ours = CausalLM(engine, engine.tokenize(TEXTS)).loss(None)
    want = _torch_loss(torch_model, engine, TEXTS)
    assert ours == pytest.approx(want, rel=1e-5)


def test_zeroing_a_head_changes_the_loss_as_torch_with_that_head_zeroed(model):
    name, engine, torch_model = model
    c = engine.config
    heads = [(0, 1), (c.num_layers - 1, c.num_heads - 1)]
    res = head_ablation_study(engine, TEXTS, heads=heads, mode="zero")
    assert res["causal"] and res["mlm_loss"] is None
    base = _torch_loss(torch_model, engine, TEXTS)
    assert res["lm_loss"] == pytest.approx(base, rel=1e-5)
    k = c.head_dim
    for (layer, head), delta in zip(heads, res["lm_loss_delta"], strict=True):

        def zero(module, args, head=head):
            x = args[0].clone()
            x[..., head * k : (head + 1) * k] = 0
            return (x,)

        hooked = _torch_loss(
            torch_model, engine, TEXTS, (_out_projection(name, torch_model, layer), zero)
        )
        assert delta == pytest.approx(hooked - base, abs=2e-5)
        assert abs(delta) > 1e-4  # the head matters in a random model


def test_a_decoder_without_its_head_reports_no_loss(tmp_path):
    path = make_llama_checkpoint(tmp_path / "bare", lm_head=False)
    engine = jaxattn.load(path, buckets=(32,))
    assert not has_lm_head(engine)
    res = head_ablation_study(engine, TEXTS[:1], heads=[(0, 0)])
    assert res["lm_loss"] is None and res["lm_loss_delta"] is None
    assert np.isfinite(res["cos_mean"][0])
    with pytest.raises(RuntimeError, match="has no next-token head"):  # only a bug builds one
        CausalLM(engine, engine.tokenize(TEXTS[:1]))
