"""A tiny, random, offline DeBERTa-v2/v3 checkpoint for tests.

    from deberta_fixture import make_deberta_checkpoint, load_deberta_torch
    path = make_deberta_checkpoint(tmp_path / "deberta")         # v3-like
    path = make_deberta_checkpoint(tmp_path / "v2", **V2_LIKE)    # v2-like
    model = load_deberta_torch(path)                              # eager, eval mode

The default config is DeBERTa-v3's layout at odd sizes (D=21, H=3, K=7,
F=29, 3 layers): relative attention with c2p and p2c, log-bucketed positions
(8 buckets, so sequences of ~40 tokens fall in the logarithmic buckets; the
relative table has 16 rows), a LayerNorm-ed relative table, share_att_key, no
absolute positions and no token types. Every LayerNorm and bias is randomised
(hf_fixtures._randomise). The tokenizer is a SentencePiece-style Unigram with
a Metaspace pre-tokenizer, built here from an explicit piece list that covers
the words of hf_fixtures._CORPUS (nothing trained, nothing downloaded), in
transformers' DebertaV2Tokenizer(Fast): `[CLS] A [SEP] B [SEP]`, token types
0 then 1, ids [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3 and [MASK] last, as DeBERTa-v3.
"""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

from hf_fixtures import _CORPUS, _randomise

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# DeBERTa-v3's layout, tiny and odd (HF DebertaV2Config field names).
DEBERTA_CONFIG = dict(
    hidden_size=21,
    num_hidden_layers=3,
    num_attention_heads=3,
    intermediate_size=29,
    max_position_embeddings=67,
    type_vocab_size=0,
    hidden_act="gelu",
    layer_norm_eps=1e-7,
    initializer_range=0.25,
    relative_attention=True,
    pos_att_type=["p2c", "c2p"],
    position_buckets=8,
    max_relative_positions=-1,  # -> max_position_embeddings (67): the log-bucket range
    norm_rel_ebd="layer_norm",
    share_att_key=True,
    position_biased_input=False,
    pad_token_id=0,
)

# DeBERTa-v2's differences (absolute positions, token types, own position projections).
V2_LIKE = dict(
    position_biased_input=True,
    type_vocab_size=2,
    share_att_key=False,
    pos_att_type=["c2p", "p2c"],
)

SPECIALS = ("[PAD]", "[CLS]", "[SEP]", "[UNK]")  # ids 0..3; [MASK] is the last id
MASK = "[MASK]"
# Words the tokenizer splits into two pieces, as a real SentencePiece vocab does.
_SPLIT = {"strawberries": ("▁straw", "berries"), "sentence": ("▁sent", "ence")}


def _pieces() -> list[tuple[str, float]]:
    """(piece, log-probability) of the Unigram model, specials first and [MASK] last.

    Whole words "▁word" (cased as in the corpus and lower-cased) score -5, so
    a corpus word is one piece (or the two of _SPLIT); single characters, with
    and without "▁", score -10 and -11: any ASCII text encodes without [UNK].
    """
    words = sorted({w for text in _CORPUS for w in re.findall(r"[A-Za-z]+", text)})
    words = sorted(set(words) | {w.lower() for w in words})
    vocab: dict[str, float] = {s: 0.0 for s in SPECIALS}
    vocab["▁"] = -4.0
    for w in words:
        for piece in _SPLIT.get(w, (f"▁{w}",)):
            vocab.setdefault(piece, -5.0)
    for c in string.ascii_letters + string.digits + string.punctuation:
        vocab.setdefault(c, -10.0)
        vocab.setdefault(f"▁{c}", -11.0)
    return [*vocab.items(), (MASK, 0.0)]


def make_deberta_tokenizer():
    """DebertaV2Tokenizer(Fast) over the Unigram pieces (cased, as DeBERTa-v3)."""
    from transformers import DebertaV2TokenizerFast

    return DebertaV2TokenizerFast(vocab=_pieces(), do_lower_case=False, split_by_punct=False)


def make_deberta_config(vocab_size: int, **overrides):
    """The DebertaV2Config of the tiny model (eager attention)."""
    from transformers import DebertaV2Config

    config = DebertaV2Config(**{**DEBERTA_CONFIG, "vocab_size": vocab_size, **overrides})
    config._attn_implementation = "eager"
    return config


def make_deberta_checkpoint(
    path: str | os.PathLike, *, seed: int = 0, mlm: bool = False, **config_overrides
) -> Path:
    """Write a tiny random DeBERTa-v2 checkpoint dir (safetensors + tokenizer); return it.

    Args:
      path: the directory to create (parents too).
      seed: torch seed of the weights.
      mlm: save DebertaV2ForMaskedLM (with its MLM head; `legacy` picks which
        head) instead of the bare DebertaV2Model.
      **config_overrides: DebertaV2Config fields on top of DEBERTA_CONFIG
        (V2_LIKE for the v2 layout).
    """
    import torch
    from transformers import DebertaV2ForMaskedLM, DebertaV2Model

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_deberta_tokenizer()
    config = make_deberta_config(len(tokenizer), **config_overrides)
    torch.manual_seed(seed)
    model = (DebertaV2ForMaskedLM if mlm else DebertaV2Model)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out


def load_deberta_torch(path: str | os.PathLike):
    """The eager PyTorch reference of a checkpoint dir, in eval mode."""
    from transformers import AutoConfig, AutoModel, DebertaV2ForMaskedLM

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    cls = (
        DebertaV2ForMaskedLM
        if "DebertaV2ForMaskedLM" in (config.architectures or ())
        else AutoModel
    )
    model = cls.from_pretrained(str(path), attn_implementation="eager", local_files_only=True)
    return model.eval()
