"""`jaxattn analyze` on a decoder: the analyses that need the model itself, not its captures.

- ``ov_copying``: each head's OV-circuit copying score from the weights
  (`jaxattn.analysis.ov_circuit`), where the checkpoint has its LM head;
- ``bos_sinks``: the attention sink with and without BOS over the first
  ``--sink-examples`` texts (`jaxattn.analysis.bos_sinks`), two captures each.

Both need a local engine (the weights, token ids); with --server, or where the
model lacks what they need, ``meta.not_run`` says why.
"""

from __future__ import annotations

from jaxattn.analysis.ov_circuit import model_copying_scores

OV_DEFINITION = (
    "sum(lambda) / sum(|lambda|) over the eigenvalues of W_E R_V W_O R_U C (Elhage et al. "
    "2021), as TransformerLens's full OV copying score: the attention and final norms' "
    "scales (and LayerNorm's centring) folded into R_V and R_U, a post-norm's scale into "
    "W_O, the logits centred over the vocabulary (C = I - 11^T / V; not with a logit "
    "soft-cap); from the [K, K] product W_O R_U C W_E R_V"
)


# Why a decoder's saved captures (a store, a capture file) have no model-level analyses.
STORED = (
    "needs the model's weights and token ids: analyse the texts with --model, not the "
    "stored captures"
)


def stored_extras() -> tuple[dict, dict]:
    """(no sections, not_run reasons) for a decoder's captures analysed as stored."""
    return {}, {"ov_copying": STORED, "bos_sinks": STORED}


def decoder_extras(source, texts: list, args) -> tuple[dict, dict]:
    """(report sections, not_run reasons) of the model-level decoder analyses."""
    from jaxattn.engine.causal_lm import has_lm_head, unembedding

    sections: dict = {}
    not_run: dict = {}
    if args.server or not hasattr(source, "step"):
        why = "needs the model's weights and token ids: use a local engine, not --server"
        return sections, {"ov_copying": why, "bos_sinks": why}
    if has_lm_head(source):
        scores = model_copying_scores(
            source.config, source.step.canonical_params(), unembedding(source)
        )
        sections["ov_copying"] = {"definition": OV_DEFINITION, "score": scores}
    else:
        not_run["ov_copying"] = (
            "the checkpoint has no LM head (neither lm_head.weight nor tied word embeddings)"
        )
    if args.sink_examples == 0:
        not_run["bos_sinks"] = "--sink-examples 0"
    else:
        from jaxattn.analysis.bos_sinks import bos_sink_study

        try:
            study = bos_sink_study(source, texts, too_long=args.too_long, limit=args.sink_examples)
        except ValueError as e:  # the tokenizer has no BOS token
            not_run["bos_sinks"] = str(e)
        else:
            if study["examples"]:
                sections["bos_sinks"] = study
            else:
                not_run["bos_sinks"] = "no text has two tokens or more without BOS"
    return sections, not_run
