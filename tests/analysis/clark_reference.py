"""A test-only reference of Clark et al. 2019's analyses, written from their released code.

clarkkev/attention-analysis at b609cfc898d1bcf7b4fd957c1bc9cd418efc0ec3:
bpe_utils.get_word_word_attention, Syntax_Analysis.ipynb (attn_head_predictor,
offset_predictor, evaluate_predictor, the Table 1 loop) and General_Analysis.ipynb
(avg_attns, entropies). Their data layout: words and 1-indexed heads (0 = root),
maps over [CLS] + tokens + [SEP]. Loops are kept as plain as theirs on purpose:
this is what jaxattn's vectorised code is checked against, never the reverse.
"""

from __future__ import annotations

import collections

import numpy as np


def word_word(token_map: np.ndarray, word_tokens: list[list[int]], mode: str) -> np.ndarray:
    """Their get_word_word_attention: columns summed over a word's tokens, then its row
    is its first token's ("first") or the mean of its tokens' rows ("mean")."""
    a = np.array(token_map, np.float64)
    later = [t for toks in word_tokens for t in toks[1:]]
    for toks in word_tokens:
        a[:, toks[0]] = a[:, toks].sum(axis=-1)
    a = np.delete(a, later, -1)
    for toks in word_tokens:
        if mode == "mean":
            a[toks[0]] = np.mean(a[toks], axis=0)
    return np.delete(a, later, 0)


def head_guesses(word_map: np.ndarray, mode: str) -> np.ndarray:
    """Their attn_head_predictor: 1-indexed guesses (mode "normal" or "transpose")."""
    a = np.array(word_map)
    if mode == "transpose":
        a = a.T
    n = a.shape[0]
    for i in range(n):
        a[i, i] = 0
    a = a[1:-1, 1:-1]
    return np.argmax(a, axis=-1) + 1


def offset_guesses(n_words: int, offset: int) -> list[int]:
    """Their offset_predictor."""
    return [max(0, min(i + offset + 1, n_words)) for i in range(n_words)]


def evaluate(examples, guesses_of) -> tuple[collections.Counter, collections.Counter]:
    """Their evaluate_predictor, as (right, wrong) counts per relation and "all".

    Their possessive check reads relation "poss" (Stanford); the UD label is
    mapped to it, and a possessor in the last position (where theirs would index
    past the end) is scored as it is.
    """
    right, wrong = collections.Counter(), collections.Counter()
    for ex in examples:
        words = ex["words"]
        guesses = guesses_of(ex)
        for i, (p, y, r) in enumerate(zip(guesses, ex["heads"], ex["relns"], strict=True)):
            ok = p == y
            if r in ("poss", "nmod:poss") and p < len(words) and i + 1 < len(words):
                if words[i + 1] == "'s" or words[i + 1] == "s'":
                    ok = guesses[i + 1] == y
            for key in (r, "all"):
                (right if ok else wrong)[key] += 1
    return right, wrong


def table(examples, n_layers: int, n_heads: int) -> dict:
    """Their Table 1 loop (every relation, root included): relation ->
    (best (layer, head, direction name), its accuracy, best offset, its accuracy)."""
    scores = {}  # (layer, head, key) -> (right, wrong)
    for key, mode in (("dep->head", "normal"), ("head<-dep", "transpose")):
        for layer in range(n_layers):
            for head in range(n_heads):

                def guess(ex, layer=layer, head=head, mode=mode):
                    return head_guesses(ex["word_attns"][layer][head], mode)

                scores[layer, head, key] = evaluate(examples, guess)
    base = {}
    for k in range(-3, 3):
        base[k] = evaluate(examples, lambda ex, k=k: offset_guesses(len(ex["words"]), k))
    out = {}
    for rel in base[0][0].keys() | base[0][1].keys():

        def acc(counts, rel=rel):
            right, wrong = counts
            return right[rel] / float(right[rel] + wrong[rel])

        ranked = sorted((acc(c), layer, head, key) for (layer, head, key), c in scores.items())
        best_base = max((acc(c), k) for k, c in base.items())
        out[rel] = (ranked[-1][1:], ranked[-1][0], best_base[1], best_base[0])
    return out


def word_tokens_of(tokens: list[str]) -> list[list[int]]:
    """[CLS], each word's pieces (``##`` continues a word), [SEP] as token index lists."""
    groups: list[list[int]] = []
    for t, tok in enumerate(tokens):
        if tok.startswith("##"):
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def avg_attns(tokens: list[str], attns: np.ndarray) -> dict[str, np.ndarray]:
    """Their per-document avg_attns terms (before the division by the number of documents),
    with their sep_sep / rest_sep denominators 2 and n - 2 written as counts of rows."""
    n = attns.shape[-1]
    seps = np.array([t == "[SEP]" for t in tokens], float)
    clss = np.array([t == "[CLS]" for t in tokens], float)
    puncts = np.array([t in (".", ",") for t in tokens], float)
    selectors = {
        "self": np.eye(n),
        "next": np.eye(n, n, 1),  # their "right"
        "prev": np.eye(n, n, -1),  # their "left"
        "sep": np.tile(seps[None], [n, 1]),
        "sep_sep": np.ones((n, n)) * seps[None] * seps[:, None],
        "rest_sep": np.ones((n, n)) * (1 - seps)[:, None] * seps[None],
        "cls": np.tile(clss[None], [n, 1]),
        "punct": np.tile(puncts[None], [n, 1]),
    }
    denoms = {"sep_sep": seps.sum(), "rest_sep": n - seps.sum()}
    return {k: (attns * s).sum(-1).sum(-1) / denoms.get(k, n) for k, s in selectors.items()}


def entropies(attns: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Their per-document (entropy, [CLS]-row entropy, uniform entropy), smoothed by 1e-4."""
    a = 0.9999 * attns + (0.0001 / attns.shape[-1])
    h = -(a * np.log(a))
    return h.sum(-1).mean(-1), h[:, :, 0].sum(-1), -np.log(1.0 / attns.shape[-1])
