"""Tiny, random, fully offline Hugging Face checkpoints for tests.

    from hf_fixtures import make_checkpoint, load_torch_model   # tests/ is on sys.path
    path = make_checkpoint("bert", tmp_path / "bert")          # config, weights, tokenizer
    model = load_torch_model(path)                             # the eager PyTorch reference

Sizes are odd on purpose (D=15/21, K=5/7/3, F=37...) so a transposed or
mis-split weight cannot hide behind a square shape. Every LayerNorm scale and
every bias gets a non-trivial random value: HF's default init sets them to 1
and 0, which would hide a dropped bias or a swapped LayerNorm. The tokenizers
are built here from an in-code vocabulary / corpus; nothing touches a hub.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FAMILIES = ("bert", "roberta", "distilbert")

EXAMPLE_A = "I went to the store."
EXAMPLE_B = "At the store, I bought fresh strawberries."

# Whole words of the WordPiece vocab; anything else falls back to letters + ##letters.
_WORDS = (
    "i went to the store at bought fresh straw ##berries a an and of in on is was it "
    "he she they we you this that with for as by from my his her their cat dog sat mat "
    "ran quick brown fox jumps over lazy hello world test long short sentence"
).split()

# Corpus the RoBERTa byte-level BPE is trained on (covers the examples' words).
_CORPUS = [
    EXAMPLE_A,
    EXAMPLE_B,
    "The quick brown fox jumps over the lazy dog.",
    "She went to the market and bought fresh bread, milk and strawberries.",
    "At the end of the day, they sat on the mat with the cat.",
    "Hello world! This is a test sentence, a long one and a short one.",
    "We went to the store at noon; he bought apples, she bought pears.",
]

# Default tiny configs (HF field names); make_checkpoint overrides on top.
_CONFIGS = {
    "bert": dict(
        hidden_size=15,
        num_hidden_layers=3,
        num_attention_heads=3,
        intermediate_size=37,
        max_position_embeddings=67,
        type_vocab_size=2,
        hidden_act="gelu",
        initializer_range=0.25,
    ),
    # RoBERTa positions start at padding_idx + 1 = 2: max length 69 - 2 = 67.
    "roberta": dict(
        hidden_size=21,
        num_hidden_layers=3,
        num_attention_heads=3,
        intermediate_size=29,
        max_position_embeddings=69,
        type_vocab_size=1,
        hidden_act="gelu",
        layer_norm_eps=1e-5,  # as real RoBERTa; 1e-5 vs 1e-12 shows in attention at 3e-5
        initializer_range=0.25,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ),
    "distilbert": dict(
        dim=15,
        n_layers=3,
        n_heads=5,
        hidden_dim=37,
        max_position_embeddings=67,
        activation="gelu",
        initializer_range=0.25,
    ),
}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}: valid are {', '.join(FAMILIES)}")


def make_tokenizer(family: str):
    """A fast tokenizer for `family`, built offline (WordPiece or byte-level BPE)."""
    _check_family(family)
    if family == "roberta":
        return _roberta_tokenizer()
    from transformers import BertTokenizerFast, DistilBertTokenizerFast

    cls = DistilBertTokenizerFast if family == "distilbert" else BertTokenizerFast
    return cls(vocab=wordpiece_vocab(), do_lower_case=True)


def wordpiece_vocab() -> dict[str, int]:
    """The tiny WordPiece vocabulary of the BERT-style fixtures: specials, characters, words."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = list(string.ascii_lowercase + string.digits)
    vocab = list(
        dict.fromkeys(
            specials + list(string.punctuation) + letters + [f"##{c}" for c in letters] + _WORDS
        )
    )
    return {t: i for i, t in enumerate(vocab)}


def _roberta_tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, pad = 1 as in RoBERTa
    bpe = ByteLevelBPETokenizer()  # its trainer starts from all 256 bytes: any text encodes
    bpe.train_from_iterator(
        _CORPUS,
        vocab_size=330,
        min_frequency=1,
        special_tokens=specials,
        show_progress=False,
    )
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return RobertaTokenizerFast(vocab=model["vocab"], merges=merges)


def _randomise(model, seed: int) -> None:
    """Give LayerNorm scales and all biases non-trivial values (default: 1 and 0)."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            is_norm = "norm" in name.lower()
            if leaf == "bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif is_norm and leaf == "weight":
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))


def make_config(family: str, vocab_size: int, **overrides):
    """The transformers config object of a tiny `family` model (eager attention)."""
    _check_family(family)
    from transformers import BertConfig, DistilBertConfig, RobertaConfig

    cls = {"bert": BertConfig, "roberta": RobertaConfig, "distilbert": DistilBertConfig}[family]
    fields = {**_CONFIGS[family], "vocab_size": vocab_size, **overrides}
    config = cls(**fields)
    config._attn_implementation = "eager"
    return config


def make_checkpoint(
    family: str,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    weights: str = "safetensors",
    **config_overrides,
) -> Path:
    """Write a tiny random HF checkpoint directory of `family` and return its path.

    Args:
      family: "bert", "roberta" or "distilbert".
      out_dir: the directory to create (parents too).
      seed: torch seed of the weights (same seed, same checkpoint).
      weights: "safetensors" (model.safetensors) or "bin" (pytorch_model.bin).
      **config_overrides: HF config fields (e.g. num_hidden_layers=2).

    Returns:
      out_dir as a Path, holding config.json, the weights and tokenizer files.
    """
    import torch
    from transformers import BertModel, DistilBertModel, RobertaModel

    if weights not in ("safetensors", "bin"):
        raise ValueError(f"weights must be 'safetensors' or 'bin', got {weights!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(family)
    config = make_config(family, len(tokenizer), **config_overrides)
    cls = {"bert": BertModel, "roberta": RobertaModel, "distilbert": DistilBertModel}[family]
    torch.manual_seed(seed)
    model = cls(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out), safe_serialization=weights == "safetensors")
    if weights == "bin" and not (out / "pytorch_model.bin").is_file():
        # transformers 5 may write safetensors regardless: write the .bin ourselves.
        for f in out.glob("model*.safetensors*"):
            f.unlink()
        torch.save(model.state_dict(), out / "pytorch_model.bin")
    tokenizer.save_pretrained(str(out))
    if family != "roberta":  # the classic WordPiece file too, as real BERT checkpoints have
        vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        (out / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab))
    return out


def load_torch_model(path: str | os.PathLike):
    """The PyTorch reference model of a checkpoint dir, eager attention, eval mode."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path), attn_implementation="eager", local_files_only=True)
    return model.eval()


def load_tokenizer(path: str | os.PathLike):
    """The checkpoint's HF tokenizer (local files only)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def torch_inputs(tokenizer, texts, family: str):
    """Padded torch inputs for a batch of strings or (a, b) pairs, as the reference sees them."""
    pairs = [t for t in texts if isinstance(t, tuple)]
    if pairs and len(pairs) != len(texts):
        raise ValueError("torch_inputs takes all singles or all pairs")
    if pairs:
        enc = tokenizer(
            [a for a, _ in texts], [b for _, b in texts], padding=True, return_tensors="pt"
        )
    else:
        enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    if family == "distilbert":
        enc.pop("token_type_ids", None)
    return enc


def attention_modules(model, family: str) -> list:
    """Per layer, the (query, key, value, output) Linear modules of the torch model."""
    if family == "distilbert":
        return [
            (a.q_lin, a.k_lin, a.v_lin, a.out_lin)
            for a in (layer.attention for layer in model.transformer.layer)
        ]
    return [
        (
            layer.attention.self.query,
            layer.attention.self.key,
            layer.attention.self.value,
            layer.attention.output.dense,
        )
        for layer in model.encoder.layer
    ]


def torch_reference(model, family: str, enc) -> dict:
    """Run the eager torch model on padded inputs `enc`; numpy float64 outputs.

    Returns a dict of batch-first arrays: attention [B,L,H,T,T], hidden_states
    [B,L+1,T,D], and from forward hooks on the projection Linears queries/keys/
    values [B,L,H,T,K] (per head, bias included) and scores = q.k/sqrt(K)
    [B,L,H,T,T] (before the mask).
    """
    import numpy as np
    import torch

    heads = model.config.num_attention_heads if family != "distilbert" else model.config.n_heads
    seen: dict[str, list] = {"queries": [], "keys": [], "values": []}
    hooks = []
    for q, k, v, _ in attention_modules(model, family):
        for name, mod in (("queries", q), ("keys", k), ("values", v)):
            hooks.append(
                mod.register_forward_hook(
                    lambda _m, _i, out, name=name: seen[name].append(out.detach())
                )
            )
    try:
        with torch.no_grad():
            out = model(**enc, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    ref = {
        "attention": torch.stack(out.attentions, 1),
        "hidden_states": torch.stack(out.hidden_states, 1),
    }
    for name, outs in seen.items():
        b, t, hk = outs[0].shape
        # [B, T, H*K] -> [B, H, T, K]: HF's head-major split (transpose_for_scores).
        ref[name] = torch.stack([o.view(b, t, heads, hk // heads).transpose(1, 2) for o in outs], 1)
    ref = {k: v.double().numpy() for k, v in ref.items()}
    k_dim = ref["queries"].shape[-1]
    ref["scores"] = np.einsum("blhtk,blhsk->blhts", ref["queries"], ref["keys"]) / np.sqrt(k_dim)
    return ref


def long_text(tokenizer, min_tokens: int) -> str:
    """A plain lowercase sentence of at least `min_tokens` tokens (special tokens included)."""
    words = "the quick brown fox jumps over the lazy dog and".split()
    text = ""
    i = 0
    while len(tokenizer(text)["input_ids"]) < min_tokens:
        text = f"{text} {words[i % len(words)]}".strip()
        i += 1
    return text
