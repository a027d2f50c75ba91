"""ELECTRA/ALBERT heads and the declarative config tables of the newer families.

The masked-LM heads (ELECTRA's generator, ALBERT's) map D -> E and tie their
decoder to the E-wide word embedding: jaxattn's head must give torch's logits.
Config refusals go through `translate` on plain dicts: no torch, no files.
"""

from __future__ import annotations

import numpy as np
import pytest
from family_fixtures import CONFIGS, make_family_checkpoint
from hf_fixtures import EXAMPLE_B, load_tokenizer

import jaxattn
from jaxattn.checkpoints.hf_config import translate
from jaxattn.engine.mlm import MaskedLM
from jaxattn.errors import CheckpointError


@pytest.mark.parametrize("family", ["electra", "albert"])
def test_the_masked_lm_head_gives_torchs_logits(family, tmp_path):
    import torch
    import transformers

    path = make_family_checkpoint(family, tmp_path / family, head=True)
    engine = jaxattn.load(path, buckets=(24,))
    assert "mlm_head" in engine.extra_params
    cap = engine.capture([EXAMPLE_B], what="hidden_states", layers=-1)[0]
    got = MaskedLM(engine, [], mask_rate=0.15, seed=0).logits(cap.hidden_states[-1])
    name = {"electra": "ElectraForMaskedLM", "albert": "AlbertForMaskedLM"}[family]
    model = getattr(transformers, name).from_pretrained(path, attn_implementation="eager").eval()
    enc = load_tokenizer(path)(EXAMPLE_B, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        want = model(**enc).logits[0].double().numpy()
    np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, np.abs(want).max()), rtol=0)


def _hf(family: str, **fields) -> dict:
    return {"model_type": family, "vocab_size": 50, **CONFIGS[family], **fields}


def test_the_new_families_translate_with_their_switches():
    electra = translate(_hf("electra"), name="e")
    assert (electra.family, electra.embedding_size, electra.layer_groups) == ("electra", 13, 0)
    albert = translate(_hf("albert"), name="a")
    assert (albert.layer_groups, albert.weight_layers, albert.activation) == (2, 2, "gelu_tanh")
    assert [albert.weights_of_layer(i) for i in range(4)] == [0, 0, 1, 1]
    # AlbertConfig's defaults apply to fields config.json leaves out.
    bare = {k: v for k, v in _hf("albert").items() if k not in ("hidden_act", "embedding_size")}
    assert translate(bare, name="a").embedding_size == 128
    for model_type in ("xlm-roberta", "camembert"):
        c = translate(_hf("xlm-roberta", model_type=model_type), name="x")
        assert (c.family, c.position_offset, c.max_length) == ("roberta", 2, 67)


@pytest.mark.parametrize(
    ("family", "fields", "says"),
    [
        (
            "albert",
            {"inner_group_num": 2},
            "inner_group_num=2 is not supported: jaxattn computes only inner_group_num=1",
        ),
        ("albert", {"num_hidden_groups": 5}, "num_hidden_groups=5 must lie in 1..4"),
        ("electra", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ("electra", {"embedding_size": "13"}, 'embedding_size is "13" (a string)'),
        ("xlm-roberta", {"rope_theta": 1.0}, "field 'rope_theta' of model_type 'xlm-roberta'"),
        ("electra", {"hidden_act": "mish"}, "unsupported activation 'mish'"),
    ],
)
def test_unsupported_options_are_refused_by_name(family, fields, says):
    with pytest.raises(CheckpointError) as info:
        translate(_hf(family, **fields), name="x")
    assert says in str(info.value)


def test_convert_keeps_a_shared_weight_model_exact(tmp_path):
    from jaxattn.checkpoints import convert_checkpoint

    hf = make_family_checkpoint("albert", tmp_path / "hf")
    convert_checkpoint(hf, tmp_path / "native")
    a, b = jaxattn.load(hf), jaxattn.load(tmp_path / "native")
    # ModelInfo holds the weights' fingerprint: equal info, bit-equal weights.
    assert b.info == a.info and b.info.shared_weights and b.config == a.config
    assert b.tokenize([(EXAMPLE_B, "ok")]) == a.tokenize([(EXAMPLE_B, "ok")])


def test_a_tokenizer_larger_than_the_vocabulary_is_refused_naming_its_file(tmp_path):
    import shutil

    electra = make_family_checkpoint("electra", tmp_path / "electra")
    albert = make_family_checkpoint("albert", tmp_path / "albert")
    for f in electra.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            f.unlink()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(albert / name, electra / name)
    with pytest.raises(
        CheckpointError,
        match=r"tokenizer.json: the tokenizer gives ids up to "
        r"\d+, but the model's vocab_size is \d+",
    ):
        jaxattn.load(electra)
