"""DeBERTa's disentangled attention parts (jaxattn.engine.relative) against HF's torch code.

References: transformers' build_relative_position (relative positions), and a
random tiny DisentangledSelfAttention: its own disentangled_attention_bias for
each position term and the real input of its softmax (recorded) for the sum.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from deberta_fixture import V2_LIKE, load_deberta_torch, make_deberta_checkpoint
from transformers import DebertaV2Config
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf

from jaxattn.engine.relative import (
    attention_span,
    disentangled_scores,
    relative_positions,
    score_scale,
)
from jaxattn.errors import CheckpointError

D, H, K, T = 21, 3, 7, 37


@pytest.mark.parametrize(
    "length, buckets, max_relative",
    [
        (600, 256, 512),  # DeBERTa-v2/v3's real setting, past max_position_embeddings
        (600, -1, 512),  # no buckets
        (600, 0, 512),
        (37, 8, 67),  # the fixture's
        (41, 8, 12),  # distances past max_relative
        (23, 7, 30),  # odd bucket count
        (301, 128, 512),
        (301, 256, 1024),
        (1, 256, 512),
        (2, 8, 67),
    ],
)
def test_relative_positions_equal_hf(length, buckets, max_relative):
    x = torch.zeros(1, length, 1)
    want = hf.build_relative_position(x, x, bucket_size=buckets, max_position=max_relative)[0]
    got = relative_positions(length, buckets, max_relative)
    assert got.dtype == np.int32 and got.shape == (length, length)
    np.testing.assert_array_equal(got, want.numpy())


def test_relative_positions_cached_read_only_and_degenerate_refused():
    rel = relative_positions(9, 8, 67)
    assert rel is relative_positions(9, 8, 67) and not rel.flags.writeable
    for buckets, max_relative in ((1, 67), (8, 5)):  # HF divides by zero for both
        with pytest.raises(CheckpointError, match="degenerate"):
            relative_positions(9, buckets, max_relative)


@pytest.mark.parametrize(
    "max_relative, buckets, max_positions",
    [(-1, 256, 512), (-1, -1, 512), (0, 8, 67), (6, -1, 67), (12, 8, 67), (12, 0, 67)],
)
def test_attention_span_is_hfs(max_relative, buckets, max_positions):
    config = _config(
        ("c2p", "p2c"), True, buckets, max_relative, max_position_embeddings=max_positions
    )
    attention = hf.DisentangledSelfAttention(config)
    encoder = hf.DebertaV2Encoder(config)
    got = attention_span(max_relative, buckets, max_positions)
    assert got == (attention.max_relative_positions, attention.pos_ebd_size)
    assert encoder.rel_embeddings.num_embeddings == 2 * got[1]


def _config(att_types, share, buckets, max_relative, **extra):
    fields = dict(
        hidden_size=D,
        num_attention_heads=H,
        num_hidden_layers=1,
        intermediate_size=29,
        max_position_embeddings=67,
        relative_attention=True,
        pos_att_type=list(att_types),
        position_buckets=buckets,
        max_relative_positions=max_relative,
        share_att_key=share,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return DebertaV2Config(**{**fields, **extra})


def _heads(t):  # torch [T, H*K] -> numpy [T, H, K]
    return t.detach().reshape(t.shape[0], H, K).numpy()


@pytest.mark.parametrize(
    "att_types, share, buckets, max_relative",
    [
        (("p2c", "c2p"), True, 8, -1),  # v3-like: buckets over max_position_embeddings
        (("p2c", "c2p"), False, 8, 12),  # distances past max_relative: clamped indices
        (("c2p", "p2c"), False, -1, 6),  # no buckets, span 6 < T: clamped indices
        (("c2p",), True, 8, -1),
        (("c2p",), False, -1, -1),
        (("p2c",), False, 5, 30),
    ],
)
def test_disentangled_scores_equal_hf(monkeypatch, att_types, share, buckets, max_relative):
    torch.manual_seed(len(att_types) + 2 * share + buckets)
    config = _config(att_types, share, buckets, max_relative)
    module = hf.DisentangledSelfAttention(config).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.4 * torch.randn(p.shape))
    max_rel, span = attention_span(max_relative, buckets, config.max_position_embeddings)
    x = torch.randn(1, T, D)
    table = torch.randn(1, 2 * span, D)  # the (LayerNorm-ed) rel_embeddings, as the encoder passes

    seen = []
    softmax = torch.nn.functional.softmax
    monkeypatch.setattr(
        torch.nn.functional, "softmax", lambda s, dim: seen.append(s) or softmax(s, dim=dim)
    )
    with torch.no_grad():
        module(x, torch.ones(1, 1, T, T), rel_embeddings=table[0])
        monkeypatch.undo()
        q, k = module.query_proj(x[0]), module.key_proj(x[0])
        q_rows = module.query_proj if share else getattr(module, "pos_query_proj", None)
        k_rows = module.key_proj if share else getattr(module, "pos_key_proj", None)
        pos_q = None if "p2c" not in att_types else _heads(q_rows(table[0]))
        pos_k = None if "c2p" not in att_types else _heads(k_rows(table[0]))
        # Each HF term alone: its own disentangled_attention_bias with one pos_att_type,
        # at the full scale factor.
        factor = 1 + len(att_types)
        ql, kl = (
            module.transpose_for_scores(p(x), H) for p in (module.query_proj, module.key_proj)
        )
        want = {"c2c": torch.bmm(ql, kl.transpose(-1, -2) / hf.scaled_size_sqrt(ql, factor))}
        for term in att_types:
            module.pos_att_type = [term]
            want[term] = module.disentangled_attention_bias(ql, kl, None, table[0], factor)

    rel = relative_positions(T, buckets, max_rel)
    got = disentangled_scores(_heads(q), _heads(k), pos_q, pos_k, rel, att_types, span)
    assert set(got) == {"c2c", *att_types}
    assert score_scale(K, att_types) == np.float32(np.sqrt(K * factor))
    for name, ref in want.items():
        np.testing.assert_allclose(
            np.asarray(got[name]), ref.numpy(), rtol=1e-5, atol=1e-5, err_msg=name
        )
    total = got["c2c"] + sum(got[t] for t in att_types)
    np.testing.assert_allclose(np.asarray(total), seen[0][0].numpy(), rtol=1e-5, atol=1e-5)
    assert float(np.abs(np.asarray(total) - np.asarray(got["c2c"])).max()) > 0.1  # terms matter


def test_disentangled_scores_refuses_unknown_terms():
    q = np.zeros((3, H, K), np.float32)
    with pytest.raises(RuntimeError, match="unknown att_types"):
        disentangled_scores(q, q, q, q, relative_positions(3, -1, 4), ("c2c",), 4)


@pytest.mark.parametrize("overrides", [{}, V2_LIKE], ids=["v3-like", "v2-like"])
def test_fixture_builds_loads_and_runs(tmp_path, overrides):
    from transformers import AutoTokenizer

    path = make_deberta_checkpoint(tmp_path / "deberta", **overrides)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    enc = tokenizer(
        "I went to the store.", "At the store, I bought fresh strawberries.", return_tensors="pt"
    )
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert tokens[:3] == ["[CLS]", "▁I", "▁went"] and tokens[-1] == "[SEP]"
    assert tokens.count("[SEP]") == 2 and "[UNK]" not in tokens and "berries" in tokens
    sep = tokens.index("[SEP]")
    assert enc["token_type_ids"][0].tolist() == [0] * (sep + 1) + [1] * (len(tokens) - sep - 1)
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id) == (0, 1, 2)
    assert tokenizer.mask_token_id == len(tokenizer) - 1

    model = load_deberta_torch(path)
    assert not model.training and model.config._attn_implementation == "eager"
    names = set(model.state_dict())
    assert ("embeddings.position_embeddings.weight" in names) == bool(overrides)
    assert ("encoder.layer.0.attention.self.pos_key_proj.weight" in names) == bool(overrides)
    assert model.encoder.rel_embeddings.num_embeddings == 16 and "encoder.LayerNorm.bias" in names
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    assert len(out.attentions) == 3 and len(out.hidden_states) == 4
    assert torch.isfinite(out.last_hidden_state).all()
    ln = model.encoder.layer[0].attention.output.LayerNorm.requires_grad_(False)
    assert float((ln.weight - 1).abs().max()) > 0.05 and float(ln.bias.abs().max()) > 0.05
