"""A readable Markdown summary of a report.json dict (`jaxattn.analysis.report`)."""

from __future__ import annotations

import numpy as np

_STAT_NAMES = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "punct": ". ,",
    "self": "self",
    "prev": "prev",
    "next": "next",
    "entropy": "entropy",
    "entropy_cls": "entropy [CLS] row",
    "sep_sep": "[SEP]→[SEP]",
    "rest_sep": "other→[SEP]",
}


# The columns of the mixing table: what v_ij, token j's contribution to token i, is.
MIXING_COLUMNS = {
    "Attn-W": "attention weights alone (v_ij: the heads' mean weight alpha_ij)",
    "Attn-N": "the attention output (v_ij: the vector sum over heads of alpha_ij f_h(x_j))",
    "AttnRes-W": "weights with the residual as the identity (v_ij: 0.5 weight, + 0.5 if j = i)",
    "AttnRes-N": "the attention output plus the residual connection (x_i added to v_ii)",
    "AttnResLn-N": "AttnRes-N through the LayerNorm that follows the sum: what the block passes on",
}

# A pre-norm model's last column (every decoder, and ModernBERT: docs/families.md,
# "Mixing ratios in pre-LN models"): no norm follows the sum on the residual stream.
PRE_NORM_MIXING_COLUMNS = {
    **MIXING_COLUMNS,
    "AttnResLn-N": "AttnRes-N through the norm that reads the sum next, the FFN's input norm "
    "(ModernBERT's mlp_norm, GPT-2's ln_2, Llama's post_attention_layernorm); the residual "
    "stream itself carries the sum on unnormalised",
}

_WORD_ROWS = {
    "mean": "the mean of its pieces' rows (the paper)",
    "first": "its first piece's row (the released code's default)",
}


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _weights(stats: dict) -> str:
    """What the per-layer cells hold: attention weights, and norm-based ones where they
    were computed (not with --no-norm)."""
    if any(name.startswith("norm_") for name in stats):
        return "attention weights / norm-based weights, Kobayashi et al. 2020"
    return "attention weights; no norm-based weights (--no-norm)"


def _strongest(a: np.ndarray, layers, heads, pick=np.nanargmax) -> str:
    """The head `pick` chooses of a [L, H] score, "layer-head (score)", or, when every
    head with a score scores the same (every one 0, say), that none stands out."""
    scored = np.count_nonzero(~np.isnan(a))
    if not scored:  # every head NaN (no text it could score)
        return "none (no head has a score)"
    if scored > 1 and np.nanmax(a) == np.nanmin(a):
        which = "every head with a score" if np.isnan(a).any() else "every head"
        return f"none stands out ({which} {_f(np.nanmax(a))})"
    li, hi = np.unravel_index(pick(a), a.shape)
    return f"{layers[li]}-{heads[hi]} ({_f(a[li, hi])})"


def _uniform(value) -> str:
    return "" if value is None else f"; uniform attention would give {value:.3f} (mean ln T)"


def _head_stats(report: dict) -> list[str]:
    stats = report["head_stats"]
    layers = report["meta"]["layers"]
    heads = report["meta"]["heads"]
    lines = [
        "## Head statistics",
        "",
        f"Mean over heads per layer ({_weights(stats)}). Mass = mean over query tokens "
        "of the weight on those keys; [SEP]→[SEP] and "
        "other→[SEP] over the [SEP] rows and the other rows only (Clark et al. 2019). Entropy "
        "in nats, of rows smoothed as Clark et al. do ((1 − 1e-4) w + 1e-4 / T)"
        + _uniform(report["meta"].get("uniform_entropy"))
        + ".",
        "",
    ]
    names = [n for n in _STAT_NAMES if n in stats]
    rows = []
    for li, layer in enumerate(layers):
        row = [layer]
        for n in names:
            a = np.mean(stats[n][li])
            b = stats.get(f"norm_{n}")
            row.append(_f(a) + (f" / {_f(np.mean(b[li]))}" if b is not None else ""))
        rows.append(row)
    lines += _table(["layer", *[_STAT_NAMES[n] for n in names]], rows)
    lines += ["Most extreme heads (layer-head):", ""]
    rows = []
    for n in names:
        a = np.asarray(stats[n], float)
        rows.append(
            [
                _STAT_NAMES[n],
                _strongest(a, layers, heads),
                _strongest(a, layers, heads, np.nanargmin),
            ]
        )
    return lines + _table(["stat", "highest", "lowest"], rows)


_DECODER_NAMES = {
    "first": "first token",
    "prev": "prev",
    "self": "self",
    "punct": ". ,",
    "entropy": "entropy",
    "induction": "induction",
    "duplicate": "duplicate",
}


def _decoder(report: dict) -> list[str]:
    """A decoder's heads: the per-layer means and the strongest head of each score."""
    stats = report["decoder_heads"]
    layers, heads = report["meta"]["layers"], report["meta"]["heads"]
    lines = [
        "## Decoder heads",
        "",
        f"Mean over heads per layer ({_weights(stats)}), each a mean over query rows "
        "1 .. T-1 (row 0 sees only itself): the weight on "
        "the first token (the attention sink, Xiao et al. 2023), on the previous token, on "
        "itself, on punctuation, the row entropy in nats (rows smoothed over the keys they "
        "see)"
        + (
            "; induction: the weight on the tokens that followed earlier occurrences of the "
            "row's token (Olsson et al. 2022), duplicate: on those earlier occurrences, over "
            "the rows that have one"
            if "induction" in stats
            else "; not induction and duplicate, which need the maps (not with --stats-only)"
        )
        + " (jaxattn.analysis.decoder).",
        "",
    ]
    names = [n for n in _DECODER_NAMES if n in stats]

    def mean(a):
        a = np.asarray(a, float)
        return None if np.isnan(a).all() else float(np.nanmean(a))

    rows = []
    for li, layer in enumerate(layers):
        row = [layer]
        for n in names:
            b = stats.get(f"norm_{n}")
            row.append(
                _f(mean(np.asarray(stats[n], float)[li]))
                + (f" / {_f(mean(np.asarray(b, float)[li]))}" if b is not None else "")
            )
        rows.append(row)
    lines += _table(["layer", *[_DECODER_NAMES[n] for n in names]], rows)
    rows = []
    for n in names:
        a = np.asarray(stats[n], float)
        if np.isnan(a).all():
            rows.append([_DECODER_NAMES[n], "- (no example had such a row)"])
            continue
        rows.append([_DECODER_NAMES[n], _strongest(a, layers, heads)])
    lines += ["Strongest head per score (layer-head):", ""]
    lines += _table(["score", "highest"], rows)
    lines += _decoder_model_lines(report)
    skipped = report["meta"].get("not_run", {})
    if skipped:
        lines += ["Not computed for a decoder:", ""]
        lines += [f"- {name}: {why}." for name, why in skipped.items()]
        lines.append("")
    return lines


def _top_heads(a, layers, heads, n: int = 5) -> str:
    a = np.asarray(a, float)
    scored = np.count_nonzero(~np.isnan(a))
    if not scored:  # every head NaN (no text it could score)
        return "none (no head has a score)"
    if scored > 1 and np.nanmax(a) == np.nanmin(a):
        return _strongest(a, layers, heads)
    order = np.argsort(-np.nan_to_num(a, nan=-np.inf), axis=None)[:n]
    cells = [np.unravel_index(i, a.shape) for i in order]
    return ", ".join(f"{layers[li]}-{heads[hi]} ({_f(a[li, hi])})" for li, hi in cells)


def _decoder_model_lines(report: dict) -> list[str]:
    """The OV copying scores and the sinks with and without BOS, where they were run."""
    layers, heads = report["meta"]["layers"], report["meta"]["heads"]
    lines: list[str] = []
    ov = report.get("ov_copying")
    if ov:
        score = np.asarray(ov["score"], float)
        lines += [
            "### OV copying scores (Elhage et al. 2021, Olsson et al. 2022)",
            "",
            f"Per head, from the weights: {ov['definition']}. 1: the head's output raises "
            "the logits of the tokens it attends to; -1: lowers them.",
            "",
            *_table(
                ["layer", "mean", "max"],
                [
                    [layer, _f(np.nanmean(score[li])), _f(np.nanmax(score[li]))]
                    for li, layer in enumerate(layers)
                ],
            ),
            f"Highest: {_top_heads(score, layers, heads)}.",
            "",
        ]
    sinks = report.get("bos_sinks")
    if sinks:
        names = ("bos", "first_after_bos", "first_without_bos", "shift")
        lines += [
            "### Attention sinks with and without BOS (Xiao et al. 2023)",
            "",
            f"{_sink_texts(sinks)} captured as [{sinks['bos_token']}, text] and as [text]; "
            "over the query rows of the text's tokens 1 .. n-1, the weight on BOS, on "
            "the text's first token after BOS, on that token when it comes first, and the "
            "shift (without - after BOS). Mean over heads per layer:",
            "",
            *_table(
                ["layer", *names],
                [
                    [layer, *(_f(np.nanmean(np.asarray(sinks[n], float)[li])) for n in names)]
                    for li, layer in enumerate(layers)
                ],
            ),
            "Strongest sink on the first token without BOS: "
            f"{_top_heads(sinks['first_without_bos'], layers, heads)}.",
            "",
        ]
    return lines


def _sink_texts(sinks: dict) -> str:
    """How many texts the BOS sink study used, of how many it was given."""
    n, left = sinks["examples"], sinks.get("skipped", 0)
    used = f"{n} text{'' if n == 1 else 's'}"
    if not left:
        return used
    return (
        f"{used} (the first the study could use, --sink-examples, of the input's first "
        f"{n + left}; {left} left out: too long, or of one token without BOS)"
    )


def _patterns(report: dict) -> list[str]:
    pats = report["patterns"]
    layers = report["meta"]["layers"]
    names = list(pats)
    lines = [
        "## Pattern fractions per layer",
        "",
        "Share of (example, head) maps per layer. Kovaleva et al. 2019 classes (first five) "
        "sum to 1; Vig 2019 patterns are independent labels.",
        "",
    ]
    rows = [[layer, *[_f(pats[n][li], 2) for n in names]] for li, layer in enumerate(layers)]
    return lines + _table(["layer", *names], rows)


def _dependency(table: dict, title: str, max_relations: int, settings: dict) -> list[str]:
    low, high = settings.get("baseline_offsets", (-3, 2))
    word_rows = _WORD_ROWS[settings.get("word_rows", "mean")]
    rule = "on" if settings.get("possessive_rule", True) else "off"
    lines = [
        f"## {title}",
        "",
        "Clark et al. 2019 Table 1: best (layer-head, direction) by argmax accuracy on "
        f"word-level weights (a split word's row: {word_rows}; directions: "
        f"{', '.join(settings.get('directions', ()))}; possessive rule {rule}), against the best "
        f"fixed-offset baseline (offsets {low:+d}..{high:+d}, clamped to the sentence). "
        "The row `all` scores every word, root and punctuation included.",
        "",
    ]
    rows = []
    for rel, r in list(table.items())[: max_relations + 1]:
        layer, head = r["best_head"]
        rows.append(
            [
                f"**{rel}**" if rel == "all" else rel,
                r["count"],
                f"{layer}-{head}",
                r["direction"],
                f"{100 * r['accuracy']:.1f}",
                f"{r['baseline_offset']:+d}",
                f"{100 * r['baseline_accuracy']:.1f}",
            ]
        )
    return lines + _table(
        ["relation", "count", "head", "direction", "acc %", "offset", "baseline %"], rows
    )


def _provenance(report: dict, key: str, intro: str) -> list[str]:
    """The rollout or flow table: per weight kind and layer, the mean over tokens."""
    lines = [intro, ""]
    rows = []
    for kind, stats in report[key].items():
        for li, layer in enumerate(report["meta"]["layers"]):
            rows.append(
                [kind, layer, *[_f(stats[n][li]) for n in ("self", "cls", "sep", "entropy")]]
            )
    return lines + _table(["weights", "layer", "self", "[CLS]", "[SEP]", "entropy"], rows)


def _rollout(report: dict) -> list[str]:
    intro = "Abnar & Zuidema 2020, mean over tokens of the rolled-out weights at each layer."
    return ["## Attention rollout", "", *_provenance(report, "rollout", intro)]


def _flow(report: dict) -> list[str]:
    meta = report["meta"]
    intro = (
        "Abnar & Zuidema 2020, mean over tokens of the attention flow (max-flow from each "
        f"position to each input token, rows normalised) at each layer, over "
        f"{meta.get('flow_examples', '?')} examples ({meta.get('flow_skipped', 0)} longer ones "
        "skipped)."
    )
    return ["## Attention flow", "", *_provenance(report, "flow", intro)]


def render_markdown(report: dict, max_relations: int = 30) -> str:
    """The report as Markdown: meta, head statistics, patterns, dependency heads, rollout, flow.

    Args:
      report: a report.json dict.
      max_relations: most relations listed per dependency table (most frequent first),
        after the ``all`` row.
    """
    meta = report["meta"]
    lines = ["# Attention analysis report", ""]
    for key in (
        "model",
        "input",
        "examples",
        "tokens",
        "parsed_sentences",
        "unaligned_sentences",
        "seconds",
        "machine",
    ):
        if key in meta:
            lines.append(f"- {key}: {meta[key]}")
    lines.append("")
    if "decoder_heads" in report:
        lines += _decoder(report)
    else:
        lines += _head_stats(report)
        lines += _patterns(report)
    settings = meta.get("dependency", {})
    for key, title in (
        ("dependency_heads", "attention"),
        ("dependency_heads_norm", "norm-based weights"),
    ):
        if report.get(key):
            lines += _dependency(
                report[key], f"Dependency heads ({title})", max_relations, settings
            )
    why = meta.get("not_run", {}).get("dependency_heads")
    if why and not report.get("dependency_heads") and "decoder_heads" not in report:
        lines += ["## Dependency heads", "", f"Not computed: {why}.", ""]
    if report.get("rollout"):
        lines += _rollout(report)
    if report.get("flow"):
        lines += _flow(report)
    lines += ["## Mixing ratios", ""]
    if report.get("mixing_ratios"):
        names = list(report["mixing_ratios"])
        pre_norm = meta.get("pre_norm") or meta.get("decoder")
        columns = PRE_NORM_MIXING_COLUMNS if pre_norm else MIXING_COLUMNS
        lines += [
            "How much of a token's output at a layer's attention block comes from the other "
            "tokens (0: from itself only, 1: from the others only). Kobayashi et al. 2021: "
            "r_i = ||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||), with v_ij token "
            "j's contribution to token i, the mean over every token"
            + (
                " but each example's first, which a causal model's attention keeps to itself "
                "(r = 0 whatever the model)"
                if meta.get("decoder")
                else ""
            )
            + " (jaxattn.analysis.mixing). -W measures weigh by attention weights, -N by the "
            "norms of vectors:",
            "",
            *(f"- {n}: {columns[n]}" for n in names if n in columns),
            "",
        ]
        rows = [
            [layer, *[_f(report["mixing_ratios"][n][li]) for n in names]]
            for li, layer in enumerate(meta["layers"])
        ]
        lines += _table(["layer", *names], rows)
    else:
        lines += ["None: the captures hold no attention (see jaxattn.analysis.mixing).", ""]
    if report.get("head_ablation"):
        lines += _ablation_lines(report["head_ablation"])
    return "\n".join(lines)


def _ablation_lines(res: dict) -> list[str]:
    """The heads whose ablation moves the mean-pooled output most (Kovaleva et al. 2019);
    a decoder's with its LM loss, those whose ablation raises the loss most."""
    causal = bool(res.get("causal"))
    delta = res.get("lm_loss_delta") if causal else res.get("mlm_loss_delta")
    # a change to rank by: a number (None from report.json, NaN where no text had two
    # tokens: no prediction, the loss NaN; NaN keys would leave the sort unordered)
    ranked = [d is not None and not np.isnan(d) for d in delta or ()]
    by_loss = causal and any(ranked)
    if by_loss:  # a decoder's output is its next-token loss, not a pooled vector
        key = lambda i: -delta[i] if ranked[i] else np.inf  # noqa: E731
    else:
        key = lambda i: res["cos_mean"][i]  # noqa: E731
    order = sorted(range(len(res["heads"])), key=key)[:10]
    # A decoder's first token sees only itself: made uniform, its head attends as before,
    # so its final vector, and cos_cls, cannot change (1 by construction): not a column.
    first_moves = not (causal and res["mode"] == "uniform")
    first = ["cos first token" if causal else "cos [CLS]"] if first_moves else []
    change = "LM loss change" if causal else "MLM loss change"
    head = ["head", *first, "cos mean-pooled"] + ([change] if delta else [])
    rows = [
        [f"{res['heads'][i][0]}-{res['heads'][i][1]}"]
        + ([_f(res["cos_cls"][i])] if first_moves else [])
        + [_f(res["cos_mean"][i])]
        + ([_f(delta[i])] if delta else [])
        for i in order
    ]
    most = "raise the LM loss most" if by_loss else "change the output most"
    shown = (
        f"every head, those that {most} first"
        if len(order) == len(res["heads"])
        else f"the {len(order)} that {most}"
    )
    intro = (
        f"Each head {'zeroed' if res['mode'] == 'zero' else 'made uniform'} alone over "
        f"{res['examples']} examples; {shown}."
    )
    if causal and res.get("lm_loss") is not None:
        intro += (
            f" Causal LM loss (mean next-token cross-entropy, nats) {_f(res['lm_loss'])} "
            "intact; the change is ablated - intact."
        )
    elif causal:
        intro += (
            " No causal LM loss: the checkpoint has no next-token head (neither "
            "lm_head.weight nor tied word embeddings), so only the cosines."
        )
    if not first_moves:
        intro += (
            " No first-token cosine: the first token sees only itself, so a head made "
            "uniform attends to it as before and its final vector cannot change "
            "(cos_cls is 1 by construction)."
        )
    return ["", "## Head ablation", "", intro, "", *_table(head, rows)]
