"""Head ablation: against hand-edited weights and the torch masked-LM loss.

Zeroing head h's output is the same as zeroing its rows of W_O; uniform
attention is the same as zero query and key projections (all scores equal).
Both are built by editing the checkpoint's weights by hand, loaded as a second
engine, and compared with the gated run of the first.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

import jaxattn
from jaxattn.engine.ablation import HeadAblation, head_ablation_study
from jaxattn.errors import UsageError

TEXTS = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "the store"]


@pytest.fixture(scope="module")
def mlm_dir(torch_models, checkpoint_dirs, tmp_path_factory):
    """The tiny BERT with a random masked-LM head, saved as BertForMaskedLM."""
    import transformers

    base = torch_models["bert"]
    torch.manual_seed(1)
    mlm = transformers.BertForMaskedLM(base.config)
    mlm.bert.load_state_dict(base.state_dict(), strict=False)
    with torch.no_grad():
        for p in mlm.cls.parameters():
            p.add_(0.1 * torch.randn_like(p))
    mlm.eval()
    path = tmp_path_factory.mktemp("mlm")
    mlm.save_pretrained(str(path))
    for f in checkpoint_dirs["bert"].iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            shutil.copy(f, path / f.name)
    return path


def _edited(path, tmp_path, edit):
    """A copy of the checkpoint with `edit(model)` applied to its torch weights."""
    import transformers

    model = transformers.BertForMaskedLM.from_pretrained(str(path), attn_implementation="eager")
    with torch.no_grad():
        edit(model)
    out = tmp_path / "edited"
    model.save_pretrained(str(out))
    for f in path.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            shutil.copy(f, out / f.name)
    return jaxattn.load(out)


def _final(engine, ablation=None):
    caps = engine.capture(TEXTS, what="hidden_states", layers=2, ablation=ablation)
    return [c.hidden_states[-1] for c in caps]


def test_no_ablation_changes_nothing(engines, checkpoint_dirs):
    """An ablation of no head is the identity, bit for bit where both runs take the dense
    path in every layer; the default engine's fast forward (layers nothing is captured
    from: jax.nn.dot_product_attention, which an ablation's gate does not take) agrees
    within float32 rounding."""
    dense = jaxattn.load(checkpoint_dirs["bert"], attention="dense")
    for a, b in zip(_final(dense), _final(dense, HeadAblation()), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_final(engines["bert"]), _final(dense, HeadAblation()), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_zeroed_head_equals_zeroed_output_rows(mlm_dir, tmp_path):
    engine = jaxattn.load(mlm_dir)
    k = engine.config.head_dim

    def edit(model):  # head 1 of layer 0: columns 1*k..2*k of the output dense weight
        model.bert.encoder.layer[0].attention.output.dense.weight[:, k : 2 * k] = 0

    hand = _edited(mlm_dir, tmp_path, edit)
    got = _final(engine, HeadAblation.of([(0, 1)], "zero"))
    for a, b in zip(got, _final(hand), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert not np.allclose(got[0], _final(engine)[0], atol=1e-3)


def test_uniform_head_equals_zero_query_and_key(mlm_dir, tmp_path):
    engine = jaxattn.load(mlm_dir)
    k = engine.config.head_dim

    def edit(model):  # layer 2, head 2: equal scores -> uniform over real keys
        attn = model.bert.encoder.layer[2].attention.self
        for lin in (attn.query, attn.key):
            lin.weight[2 * k : 3 * k] = 0
            lin.bias[2 * k : 3 * k] = 0

    hand = _edited(mlm_dir, tmp_path, edit)
    ablation = HeadAblation.of([(2, 2)], "uniform")
    for a, b in zip(_final(engine, ablation), _final(hand), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    att = engine.capture(TEXTS[:1], ablation=ablation)[0].attention[2, 2]
    np.testing.assert_allclose(att, np.full_like(att, 1 / att.shape[-1]), atol=1e-7)


def test_study_reports_every_head_and_the_masked_lm_loss(mlm_dir):
    import transformers

    engine = jaxattn.load(mlm_dir)
    res = head_ablation_study(engine, TEXTS, heads=[(0, 0), (1, 2)], mode="zero", mask_rate=0.3)
    assert res["heads"] == [[0, 0], [1, 2]] and res["examples"] == 3
    assert all(-1 <= c <= 1 for c in res["cos_cls"] + res["cos_mean"])
    assert len(res["mlm_loss_delta"]) == 2
    # The base loss equals torch's masked-LM loss on the same masked inputs.
    from jaxattn.engine.mlm import MaskedLM

    lm = MaskedLM(engine, engine.tokenize(TEXTS), mask_rate=0.3, seed=0)
    model = transformers.BertForMaskedLM.from_pretrained(str(mlm_dir)).eval()
    total, count = 0.0, 0
    for enc, (pos, target) in zip(lm.masked, lm.targets, strict=True):
        ids = torch.tensor([enc.ids])
        with torch.no_grad():
            logits = model(input_ids=ids, token_type_ids=torch.tensor([enc.type_ids])).logits[0]
        total += torch.nn.functional.cross_entropy(
            logits[pos], torch.tensor(target), reduction="sum"
        ).item()
        count += len(pos)
    assert res["mlm_loss"] == pytest.approx(total / count, rel=1e-4)


def test_bad_ablations_are_named(engines):
    # UsageError (a JaxattnError, as docs/errors.md promises of every error jaxattn raises)
    with pytest.raises(UsageError, match=r"\(3, 0\) is out of range"):
        engines["bert"].capture(TEXTS, ablation=HeadAblation.of([(3, 0)]))
    with pytest.raises(UsageError, match="mode"):
        HeadAblation.of([(0, 0)], "half")
    for bad in ([(0, "x")], [(0, 1.5)], [3]):
        with pytest.raises(UsageError, match="is not a \\(layer, head\\) pair of whole numbers"):
            HeadAblation.of(bad)
    assert HeadAblation.of([(np.int64(1), 0)]).zero == {(1, 0)}


def test_study_of_one_pair_not_in_a_list_is_refused_before_any_run(engines):
    with pytest.raises(UsageError, match=r"ablation head 0 is not a \(layer, head\) pair"):
        head_ablation_study(engines["bert"], TEXTS[:1], heads=(0, 1))  # was a TypeError


def test_study_of_no_text_is_refused_not_a_table_of_nans(engines):
    with pytest.raises(UsageError, match="no text to ablate over: give at least one"):
        head_ablation_study(engines["bert"], [], heads=[(0, 0)])
    with pytest.raises(
        UsageError, match="^every text was skipped as too long: nothing to ablate over$"
    ):
        head_ablation_study(engines["bert"], ["word " * 600], heads=[(0, 0)], too_long="skip")


def test_study_without_mlm_head_reports_no_loss(engines):
    res = head_ablation_study(engines["bert"], TEXTS[:1], heads=[(0, 0)], mode="uniform")
    assert res["mlm_loss"] is None and res["mlm_loss_delta"] is None


def test_study_ticks_its_progress_once_per_head(engines):
    done = []
    heads = [(0, 0), (1, 1), (0, 1)]
    res = head_ablation_study(
        engines["bert"], TEXTS[:1], heads=heads, progress=lambda: done.append(len(done))
    )
    assert done == [0, 1, 2] and len(res["cos_cls"]) == 3
