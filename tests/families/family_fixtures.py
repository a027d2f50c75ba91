"""Tiny offline checkpoints of the families beyond BERT/RoBERTa/DistilBERT.

    path = make_family_checkpoint("albert", tmp_path / "albert")
    model = load_torch_model(path)           # hf_fixtures: the eager reference

Sizes are odd (D=21, H=3, K=7, F=29, E=13) and every LayerNorm and bias is
randomised (hf_fixtures._randomise). Tokenizers are built here: WordPiece for
ELECTRA, a SentencePiece-style Unigram for ALBERT and XLM-RoBERTa, with each
family's special-token layout.
"""

from __future__ import annotations

import string
from pathlib import Path

from hf_fixtures import _CORPUS, _randomise, wordpiece_vocab

COMMON = dict(
    hidden_size=21,
    num_hidden_layers=3,
    num_attention_heads=3,
    intermediate_size=29,
    max_position_embeddings=67,
    initializer_range=0.25,
)
CONFIGS = {
    "electra": dict(COMMON, embedding_size=13, hidden_act="gelu", type_vocab_size=2),
    # 4 layers in 2 weight sets: layers 0-1 share set 0, layers 2-3 set 1.
    "albert": dict(
        COMMON,
        embedding_size=13,
        num_hidden_layers=4,
        num_hidden_groups=2,
        hidden_act="gelu_new",
        type_vocab_size=2,
    ),
    "xlm-roberta": dict(
        COMMON,
        max_position_embeddings=69,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ),
}


def _unigram(specials: list[str], unk: str):
    """A SentencePiece-style Unigram model over the corpus words, with letter fallback."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = sorted({"▁" + w.strip(".,;!?").lower() for t in _CORPUS for w in t.split()} - {"▁"})
    pieces = ["▁" + c for c in string.ascii_letters] + list(string.ascii_letters)
    pieces += list(string.punctuation + string.digits)
    vocab = [(s, 0.0) for s in specials] + [(w, -2.0 - 0.01 * i) for i, w in enumerate(words)]
    vocab += [(p, -9.0) for p in pieces]
    tok = Tokenizer(models.Unigram(vocab, unk_id=specials.index(unk), byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def make_family_tokenizer(family: str):
    """The family's fast tokenizer, built offline."""
    import transformers
    from tokenizers import processors

    if family == "electra":
        return transformers.ElectraTokenizer(vocab=wordpiece_vocab(), do_lower_case=True)
    if family == "albert":
        specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        tok = _unigram(specials, "<unk>")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
        )
        return transformers.AlbertTokenizer(
            tokenizer_object=tok,
            unk_token="<unk>",
            pad_token="<pad>",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )
    if family == "xlm-roberta":
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # fairseq's ids 0..3, as XLM-R
        tok = _unigram(specials, "<unk>")
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", 0), ("</s>", 2)],
        )
        return transformers.XLMRobertaTokenizer(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="</s>",
            sep_token="</s>",
            cls_token="<s>",
            unk_token="<unk>",
            pad_token="<pad>",
            mask_token="<mask>",
        )
    raise ValueError(f"no tiny tokenizer for {family!r}")


def make_family_checkpoint(
    family: str, out_dir, *, seed: int = 0, head: bool = False, **overrides
) -> Path:
    """Write a tiny random checkpoint of `family` (config, safetensors, tokenizer).

    head: save the family's MLM model (generator head for ELECTRA) instead of the
    bare encoder, so the head's weights are in the file too.
    """
    import torch
    import transformers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_family_tokenizer(family)
    names = {"electra": "Electra", "albert": "Albert", "xlm-roberta": "XLMRoberta"}[family]
    config = getattr(transformers, f"{names}Config")(
        **{**CONFIGS[family], "vocab_size": len(tokenizer), **overrides}
    )
    config._attn_implementation = "eager"
    cls = getattr(transformers, f"{names}ForMaskedLM" if head else f"{names}Model")
    torch.manual_seed(seed)
    model = cls(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
