"""A tiny, random, offline ModernBERT checkpoint for tests.

    from modernbert_fixture import make_modernbert_checkpoint, load_modernbert_torch
    path = make_modernbert_checkpoint(tmp_path / "mb")                # biases off (as real)
    path = make_modernbert_checkpoint(tmp_path / "mb", **BIASES_ON)   # every bias on
    model = load_modernbert_torch(path)                               # eager, eval mode

The default config is ModernBERT's layout at odd-ish sizes (D=18, H=3, K=6
(RoPE needs an even K), F=23, 4 layers): global attention in layers 0 and 3
(global_attn_every_n_layers=3), local attention in layers 1 and 2 with
local_attention=8 (a query sees keys within 4 positions: a ~30-token text
exceeds the window), different RoPE bases for global and local layers, and
biases off (norm_bias, attention_bias, mlp_bias, classifier_bias False, as the
released checkpoints; BIASES_ON turns them all on). Every LayerNorm scale and
every bias is randomised (hf_fixtures._randomise). config.vocab_size exceeds
the tokenizer's length (unused rows, as the real 50368 vs 50285).

The tokenizer mirrors ModernBERT's (a GPT-NeoX/OLMo byte-level BPE, saved as
tokenizer.json; transformers loads "modernbert" tokenizers with its generic
TokenizersBackend, whatever tokenizer_config.json names): ids 0 and 1 are
<|endoftext|> and <|padding|>, the BPE merges follow, and [UNK] [CLS] [SEP]
[PAD] [MASK] come last, in that order, as ids 50280..50284 in the real one.
Layout `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` (TemplateProcessing, type
ids 0 then 1 for B and its [SEP]); model_input_names has no token_type_ids.
"""

from __future__ import annotations

import os
from pathlib import Path

from hf_fixtures import _CORPUS, _randomise

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# ModernBERT's layout, tiny and odd-ish (HF ModernBertConfig field names).
MODERNBERT_CONFIG = dict(
    hidden_size=18,
    num_attention_heads=3,
    intermediate_size=23,
    num_hidden_layers=4,
    global_attn_every_n_layers=3,  # layers 0 and 3 global, 1 and 2 local
    local_attention=8,  # local layers: |i - j| <= 4
    global_rope_theta=1000.0,
    local_rope_theta=30.0,
    max_position_embeddings=67,
    hidden_activation="gelu",
    classifier_activation="gelu",
    norm_eps=1e-5,
    norm_bias=False,
    attention_bias=False,
    mlp_bias=False,
    classifier_bias=False,
    decoder_bias=True,
    initializer_range=0.25,
)

# Every optional bias on (LayerNorms, Wqkv/Wo, Wi/Wo, the MLM head's dense).
BIASES_ON = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True)

BPE_SPECIALS = ("<|endoftext|>", "<|padding|>")  # ids 0, 1 (GPT-NeoX)
SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")  # the last five ids
EXTRA_VOCAB_ROWS = 3  # config.vocab_size = len(tokenizer) + 3


def _bpe():
    """The byte-level BPE `tokenizers.Tokenizer` with ModernBERT's specials and layout."""
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=330,
        min_frequency=1,
        special_tokens=list(BPE_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    tok.add_special_tokens(
        [tokenizers.AddedToken(s, lstrip=s == "[MASK]", normalized=False) for s in SPECIALS]
    )
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


def make_modernbert_tokenizer():
    """The fast tokenizer (transformers' generic one, as for real ModernBERT)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_bpe(),
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
    )


def make_modernbert_config(tokenizer, **overrides):
    """The ModernBertConfig of the tiny model (eager attention), special ids from `tokenizer`."""
    from transformers import ModernBertConfig

    ids = dict(
        vocab_size=len(tokenizer) + EXTRA_VOCAB_ROWS,
        pad_token_id=tokenizer.pad_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id,  # as real ModernBERT: bos = [CLS], eos = [SEP]
        eos_token_id=tokenizer.sep_token_id,
    )
    config = ModernBertConfig(**{**MODERNBERT_CONFIG, **ids, **overrides})
    config._attn_implementation = "eager"
    return config


def make_modernbert_checkpoint(
    path: str | os.PathLike, *, seed: int = 0, mlm: bool = False, **config_overrides
) -> Path:
    """Write a tiny random ModernBERT checkpoint dir (safetensors + tokenizer); return it.

    Args:
      path: the directory to create (parents too).
      seed: torch seed of the weights.
      mlm: save ModernBertForMaskedLM (encoder under "model.", plus head.dense,
        head.norm and decoder.bias; decoder.weight is tied to the word
        embeddings) instead of the bare ModernBertModel.
      **config_overrides: ModernBertConfig fields on top of MODERNBERT_CONFIG
        (BIASES_ON for the variant with every bias).
    """
    import torch
    from transformers import ModernBertForMaskedLM, ModernBertModel

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_modernbert_tokenizer()
    config = make_modernbert_config(tokenizer, **config_overrides)
    torch.manual_seed(seed)
    model = (ModernBertForMaskedLM if mlm else ModernBertModel)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out


def load_modernbert_torch(path: str | os.PathLike):
    """The eager PyTorch reference of a checkpoint dir, in eval mode.

    Eager attention in transformers 5 runs padded (no unpadding): padded keys
    and, in local layers, keys outside the window get the dtype's minimum added
    to their score, hence exactly zero weight.
    """
    from transformers import AutoConfig, AutoModel, ModernBertForMaskedLM

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    mlm = "ModernBertForMaskedLM" in (config.architectures or ())
    cls = ModernBertForMaskedLM if mlm else AutoModel
    model = cls.from_pretrained(str(path), attn_implementation="eager", local_files_only=True)
    return model.eval()
