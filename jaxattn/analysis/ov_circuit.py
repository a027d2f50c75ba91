"""The copying score of each head's OV circuit, from the weights alone.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits", sec.
"Detecting copying behavior") and Olsson et al. 2022 (in-context learning and
induction heads: the copying half of an induction head) read a head's
embedding -> unembedding path through its value and output projections, the
full OV circuit, as a (V x V) matrix (row convention, row i the source token,
column j the logit of token j):

    M^h = W_E  R_V^h  W_O^h  R_U          (V x D)(D x K)(K x D)(D x V)

with W_E (V x D) the word embedding, W_O^h (K x D) head h's rows of the output
projection, R_V^h (D x K) the head's value projection as it reads the residual
stream (a grouped-query head, H_kv < H, reads its group's values:
h // (H / H_kv)), R_U (D x V) the unembedding (the LM head's W_U^T). A head
that copies (attending to token i raises the logit of i) has M with mostly
positive eigenvalues; the papers' summary is

    copying score = sum_i lambda_i / sum_i |lambda_i|     (in [-1, 1])

over the eigenvalues lambda_i of M (complex in general: the numerator is real,
the trace, as the complex ones come in conjugate pairs; |.| the modulus), 1 when
every eigenvalue is positive real, -1 when every one is negative.

Norms (`fold_norms`, the default), as TransformerLens's ``fold_ln`` does: the
norm before attention and the final norm are folded into their readers,
R_V = P diag(gamma_attn) W_V and R_U = P diag(gamma_final) W_U^T, with P =
I - 11^T / D the centring of a LayerNorm (I for RMSNorm) and gamma the scale
the norm multiplies by (Gemma's offset + w, `ModelConfig.norm_offset`, as
TransformerLens's ``rmsnorm_uses_offset``); the biases and the division by the
token's norm statistic (a positive scale per token) are left out. A model
with post-norms (Gemma: h = x + N_pa(attn)) writes W_O^h diag(gamma_pa) to the
residual stream, so W_O^h is taken with its post-norm's scale folded in
(TransformerLens keeps ``ln1_post`` apart, unfolded). With
``fold_norms=False``, R_V = W_V and R_U = W_U^T (the papers' toy models).

The logits are centred over the vocabulary (`center_unembed`, the default), as
TransformerLens's ``center_unembed`` does (on by default in ``from_pretrained``
and ``enable_compatibility_mode``, so its Main_Demo's "full OV copying score"
is of this matrix): R_U C with C = I_V - 11^T / V, since a softmax ignores what
a head adds to every logit alike. Not with a logit soft-cap (Gemma 2's
``final_logit_softcapping``), which is not shift-invariant; TransformerLens
refuses it there too. A uniform scale of W_E (Gemma's sqrt(D)) changes no score.

M is never formed: its nonzero eigenvalues are those of the (K x K) matrix
W_O R_U W_E R_V (the nonzero eigenvalues of AB equal those of BA), and zero
eigenvalues add nothing to either sum. R_U C W_E (D x D) is computed once per
model, in float64 over row chunks of the vocabulary (W_U^T C W_E = W_U^T W_E -
(W_U^T 1)(1^T W_E) / V).
"""

from __future__ import annotations

import numpy as np

from jaxattn.config import ModelConfig
from jaxattn.errors import UsageError

CHUNK = 8192  # vocabulary rows per float64 block of W_U^T W_E


def copying_score(eigenvalues) -> np.ndarray:
    """[..., N] eigenvalues (complex) -> [...]: Re(sum lambda) / sum |lambda| (NaN if all 0)."""
    lam = np.asarray(eigenvalues)
    total = np.abs(lam).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, lam.sum(-1).real / np.where(total > 0, total, 1.0), np.nan)


def unembed_embed(unembedding, embedding, *, center: bool = False) -> np.ndarray:
    """W_U^T W_E [D, D] in float64 from W_U [V, D] and W_E [V, D], in vocabulary chunks;
    center: W_U^T C W_E, the logits centred over the vocabulary (C = I_V - 11^T / V)."""
    u, e = np.asarray(unembedding), np.asarray(embedding)
    if u.ndim != 2 or u.shape != e.shape:
        raise UsageError(
            f"the unembedding {u.shape} and the embedding {e.shape} must both be [V, D]"
        )
    out = np.zeros((u.shape[1], u.shape[1]))
    u_sum, e_sum = np.zeros(u.shape[1]), np.zeros(u.shape[1])
    for start in range(0, u.shape[0], CHUNK):
        u_chunk = u[start : start + CHUNK].astype(np.float64)
        e_chunk = e[start : start + CHUNK].astype(np.float64)
        out += u_chunk.T @ e_chunk
        u_sum += u_chunk.sum(0)
        e_sum += e_chunk.sum(0)
    if center:
        out -= np.outer(u_sum, e_sum) / u.shape[0]
    return out


def ov_eigenvalues(gram, value, out) -> np.ndarray:
    """The K eigenvalues of W_O G W_V for G = R_U W_E (D x D), W_V (D x K), W_O (K x D): the
    nonzero eigenvalues of the full OV circuit W_E W_V W_O R_U (and K - rank zeros)."""
    c = np.asarray(out, np.float64) @ np.asarray(gram, np.float64) @ np.asarray(value, np.float64)
    return np.linalg.eigvals(c)


def _centre(d: int, norm_type: str) -> np.ndarray:
    return np.eye(d) - 1.0 / d if norm_type == "layer" else np.eye(d)


def _scale(config: ModelConfig, norm: dict) -> np.ndarray:
    """The [D] factor a norm multiplies by: its weight, plus Gemma's offset (1 + w)."""
    return np.asarray(norm["scale"], np.float64) + config.norm_offset


def model_copying_scores(
    config: ModelConfig,
    params: dict,
    unembedding,
    *,
    fold_norms: bool = True,
    center_unembed: bool = True,
) -> np.ndarray:
    """[L, H] copying scores of every head of a pre-norm decoder (see the module docstring).

    Args:
      config: the model's config (pre-norm: GPT-2, Llama).
      params: the encoder's params as the checkpoint names them, on the host
        (``Engine.step.canonical_params()``).
      unembedding: W_U [V, D], the next-token head (the word embedding when tied).
      fold_norms: fold the attention norm's and the final norm's scales (and a
        LayerNorm's centring) into the readers, as TransformerLens's fold_ln, and a
        post-norm's scale into W_O.
      center_unembed: centre the logits over the vocabulary, as TransformerLens's
        center_unembed (ignored, False, with a logit soft-cap).

    Raises:
      UsageError: a post-norm model (its attention reads a normalised sum, not the
        embedding), or a W_U whose shape is not the embedding's.
    """
    if config.norm != "pre":
        raise UsageError(
            f"the OV copying score reads a pre-norm decoder's weights; {config.name} is "
            f"{config.norm}-norm"
        )
    embedding = np.asarray(params["embeddings"]["word"])
    d, group = config.hidden_size, config.group_size
    centre = _centre(d, config.norm_type) if fold_norms else np.eye(d)
    center = center_unembed and not config.lm_softcap
    gram = unembed_embed(unembedding, embedding, center=center)  # W_U^T (C) W_E
    if fold_norms:
        gram = centre @ (_scale(config, params["final_ln"])[:, None] * gram)
    scores = np.full((config.num_layers, config.num_heads), np.nan)
    for layer in range(config.num_layers):
        p = params[f"layer_{config.weights_of_layer(layer)}"]
        value = np.asarray(p["attention"]["value"]["kernel"], np.float64)  # [D, H_kv, K]
        out = np.asarray(p["attention"]["out"]["kernel"], np.float64)  # [H, K, D]
        if fold_norms and config.has_attention_ln(layer):
            scale = _scale(config, p["attention_ln"])
            value = np.einsum("de,e,egk->dgk", centre, scale, value)
        if fold_norms and config.post_norms:  # Gemma: the residual gets N_pa(attn)
            out = out * _scale(config, p["attention_post_ln"])
        lam = np.stack(
            [ov_eigenvalues(gram, value[:, h // group], out[h]) for h in range(config.num_heads)]
        )
        scores[layer] = copying_score(lam)
    return scores
