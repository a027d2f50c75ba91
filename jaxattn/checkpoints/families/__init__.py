"""The checkpoint families jaxattn reads, one declarative `Family` each (see `family.py`).

To add one: write its file here (read `electra.py` first: BERT plus two
differences) and name it in FAMILIES; its tests and docs: CONTRIBUTING.md,
"Add a family" (a tiny checkpoint under tests/families/ that the parity tests
compare with transformers).
"""

from __future__ import annotations

from jaxattn.checkpoints.families.albert import ALBERT
from jaxattn.checkpoints.families.bert import BERT, ROBERTA
from jaxattn.checkpoints.families.deberta import DEBERTA_V2
from jaxattn.checkpoints.families.distilbert import DISTILBERT
from jaxattn.checkpoints.families.electra import ELECTRA
from jaxattn.checkpoints.families.gemma import GEMMA2, GEMMA3, REFUSED_MODEL_TYPES
from jaxattn.checkpoints.families.gpt2 import GPT2
from jaxattn.checkpoints.families.gpt_neox import GPT_NEOX
from jaxattn.checkpoints.families.llama import LLAMA
from jaxattn.checkpoints.families.mistral import MISTRAL
from jaxattn.checkpoints.families.modernbert import MODERNBERT
from jaxattn.checkpoints.families.qwen2 import QWEN2
from jaxattn.checkpoints.families.qwen3 import QWEN3
from jaxattn.checkpoints.family import Family
from jaxattn.config import ModelConfig

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        BERT,
        ROBERTA,
        DISTILBERT,
        ELECTRA,
        ALBERT,
        DEBERTA_V2,
        MODERNBERT,
        GPT2,
        LLAMA,
        MISTRAL,
        QWEN2,
        QWEN3,
        GEMMA2,
        GEMMA3,
        GPT_NEOX,
    )
}

# config.json model_type -> its family.
MODEL_TYPES: dict[str, Family] = {t: f for f in FAMILIES.values() for t in f.model_types}
# config.json model_types refused by name, with the reason (the rest of a sentence after
# the model_type), where a family reads a part of such a model.
REFUSED: dict[str, str] = {**REFUSED_MODEL_TYPES}


def norm_of(family: str) -> str | None:
    """Where family `family` puts its norms: "pre" (x + f(LN(x)): ModernBERT, the
    decoders) or "post" (LN(x + f(x)): BERT), as its table fixes it (`Family.fixed`,
    else ModelConfig's default); None for a name not in FAMILIES (a newer server's). For
    what knows a model's family but not its config: a served capture (config {})."""
    if family not in FAMILIES:
        return None
    return str(FAMILIES[family].fixed.get("norm", ModelConfig.norm))


def supported() -> str:
    """The families jaxattn reads, in words, from FAMILIES: "bert, roberta (model_type
    also xlm-roberta, camembert), ...", for messages and help."""
    words = []
    for family in FAMILIES.values():
        more = [t for t in family.model_types if t != family.name]
        also = "also " if family.name in family.model_types else ""
        words.append(family.name + (f" (model_type {also}{', '.join(more)})" if more else ""))
    return ", ".join(words)
