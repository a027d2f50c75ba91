"""report.md of a decoder, from hand-made report.json dicts (numpy only): its text says
what the numbers are of. The BOS sink study names the texts it left out of the first
--sink-examples; the ablation table says how many heads it lists (all of a model with
fewer than 10); a --stats-only table does not define induction and duplicate, which it
does not have."""

from __future__ import annotations

import numpy as np

from jaxattn.analysis import render_markdown

LAYERS, HEADS = [0, 1, 2], [0, 1, 2]
STATS = ("first", "prev", "self", "punct", "entropy")


def report(**sections) -> dict:
    grid = np.arange(9, dtype=float).reshape(3, 3) / 10
    heads = {name: grid.tolist() for name in STATS}
    return {
        "meta": {"model": "tiny", "examples": 4, "layers": LAYERS, "heads": HEADS},
        "decoder_heads": {**heads, **sections.pop("scores", {})},
        **sections,
    }


def encoder_report(**sections) -> dict:
    """An encoder's report.json dict: head statistics `sections["head_stats"]`."""
    meta = {"model": "tiny", "examples": 4, "layers": LAYERS, "heads": HEADS}
    return {"meta": meta, "patterns": {}, **sections}


def ablation_of(**changes) -> dict:
    """A decoder's head_ablation of the 9 heads, each zeroed: `changes` replaced."""
    return {
        "mode": "zero",
        "heads": [[layer, head] for layer in LAYERS for head in HEADS],
        "cos_cls": np.linspace(0.5, 0.9, 9).tolist(),
        "cos_mean": np.linspace(0.5, 0.9, 9).tolist(),
        "causal": True,
        "lm_loss": 6.5,
        "lm_loss_delta": [0.1] * 9,
        "examples": 4,
        **changes,
    }


def sinks(examples: int, skipped: int) -> dict:
    shares = np.full((3, 3), 0.25).tolist()
    names = ("bos", "first_after_bos", "first_without_bos", "shift")
    return {"bos_token": "<s>", "examples": examples, "skipped": skipped} | dict.fromkeys(
        names, shares
    )


def test_the_sink_study_counts_its_texts_and_those_it_left_out():
    md = render_markdown(report(bos_sinks=sinks(1, 1)))
    assert (
        "1 text (the first the study could use, --sink-examples, of the input's first 2; "
        "1 left out: " in md
    )
    assert "1 texts" not in md
    md = render_markdown(report(bos_sinks=sinks(3, 0)))
    assert "\n3 texts captured as [<s>, text] and as [text]; over the query rows" in md


def test_the_ablation_table_says_how_many_heads_it_lists():
    ablation = ablation_of()
    md = render_markdown(report(head_ablation=ablation))
    table = md[md.index("## Head ablation") :]
    assert "alone over 4 examples; every head, those that raise the LM loss most first." in md
    assert "the 10" not in md and table.count("\n| 0-") + table.count("\n| 1-") == 6
    assert table.count("\n| 2-") == 3  # all 9 heads
    many = {
        **ablation,
        "heads": [[layer, head] for layer in range(4) for head in range(4)],
        "cos_cls": np.linspace(0.5, 0.9, 16).tolist(),
        "cos_mean": np.linspace(0.5, 0.9, 16).tolist(),
        "lm_loss_delta": [0.1] * 16,
    }
    md = render_markdown(report(head_ablation=many))
    assert "alone over 4 examples; the 10 that raise the LM loss most." in md
    encoder = {**many, "causal": False, "lm_loss_delta": None, "lm_loss": None}
    assert "the 10 that change the output most." in render_markdown(report(head_ablation=encoder))


def test_a_decoders_ablation_table_ranks_the_heads_by_their_lm_loss_change():
    """The heads that raise the causal LM loss most come first, whatever the cosines say
    (a decoder's output is its next-token prediction; cos_mean ranks the other way here)."""
    heads = [[layer, head] for layer in range(4) for head in range(4)]
    delta = [0.01 * k for k in range(16)]  # head k raises the loss by k / 100
    delta[3] = None  # a head without a loss change is listed last
    ablation = {
        "mode": "zero",
        "heads": heads,
        "cos_cls": [0.9] * 16,
        "cos_mean": [0.5 + 0.01 * k for k in range(16)],  # head 0 moves the pooled vector most
        "causal": True,
        "lm_loss": 6.5,
        "lm_loss_delta": delta,
        "examples": 4,
    }
    md = render_markdown(report(head_ablation=ablation))
    rows = [r for r in md[md.index("## Head ablation") :].splitlines() if r.startswith("| ")]
    listed = [r.split(" | ")[0][2:] for r in rows[1:]]
    assert listed == [f"{k // 4}-{k % 4}" for k in range(15, 5, -1)]


def test_a_decoders_ablation_without_a_loss_change_to_rank_by_ranks_by_the_cosine():
    """No finite LM loss change (every text one token: no prediction, the loss NaN, or
    null as report.json reads it): the heads are ranked as an encoder's, by cos_mean,
    and the text does not claim a loss they raise; a NaN among finite changes is listed
    last, the others still in order (NaN compared as nothing broke the sort)."""
    cos_mean = [0.5 + 0.01 * k for k in range(9)][::-1]  # head 8 moves the vector most
    for missing in (float("nan"), None):
        ablation = ablation_of(lm_loss=missing, lm_loss_delta=[missing] * 9, cos_mean=cos_mean)
        md = render_markdown(report(head_ablation=ablation))
        table = md[md.index("## Head ablation") :]
        assert "raise the LM loss most" not in table
        assert "those that change the output most first" in table
        rows = [r for r in table.splitlines() if r.startswith("| ")]
        assert [r.split(" | ")[0][2:] for r in rows[1:]] == [
            f"{k // 3}-{k % 3}" for k in range(8, -1, -1)
        ]
    delta = [0.01 * k for k in range(9)]
    delta[4] = float("nan")
    md = render_markdown(report(head_ablation=ablation_of(lm_loss_delta=delta)))
    rows = [r for r in md[md.index("## Head ablation") :].splitlines() if r.startswith("| ")]
    listed = [r.split(" | ")[0][2:] for r in rows[1:]]
    assert listed == [f"{k // 3}-{k % 3}" for k in (8, 7, 6, 5, 3, 2, 1, 0, 4)]


def test_stats_only_defines_only_the_scores_its_table_has():
    with_maps = report(scores={"induction": [[0.5] * 3] * 3, "duplicate": [[0.1] * 3] * 3})
    md = render_markdown(with_maps)
    assert "induction: the weight on the tokens that followed earlier occurrences" in md
    assert "| induction | duplicate |" in md
    md = render_markdown(report())  # --stats-only: the on-device statistics alone
    assert "| entropy |\n" in md and "induction: the weight" not in md
    assert "not induction and duplicate, which need the maps (not with --stats-only)" in md


def test_a_decoder_without_its_lm_head_says_why_its_ablation_has_no_loss():
    ablation = ablation_of(cos_cls=[0.9] * 9, lm_loss=None, lm_loss_delta=None)
    md = render_markdown(report(head_ablation=ablation))
    assert "No causal LM loss: the checkpoint has no next-token head" in md
    assert "those that change the output most first" in md and "LM loss change" not in md


def test_a_decoders_mixing_table_names_the_norm_after_the_sum_as_a_pre_norm_model_has_it():
    mixing = {n: [0.5] * 3 for n in ("Attn-W", "Attn-N", "AttnResLn-N")}
    decoder = report(mixing_ratios=mixing)
    decoder["meta"]["decoder"] = True
    md = render_markdown(decoder)
    assert "- AttnResLn-N: AttnRes-N through the norm that reads the sum next, the FFN's" in md
    assert "what the block passes on" not in md
    decoder["meta"]["decoder"] = False  # an encoder's meta: the post-LN reading
    md = render_markdown(decoder)
    assert "- AttnResLn-N: AttnRes-N through the LayerNorm that follows the sum: what" in md


def test_a_pre_norm_encoders_mixing_table_reads_as_a_decoders():
    """ModernBERT (an encoder, pre-LN: meta.pre_norm) has the FFN's input norm after the
    sum, as a decoder has: the pre-norm reading, not the post-LN block's."""
    mixing = {n: [0.5] * 3 for n in ("Attn-W", "AttnResLn-N")}
    encoder = encoder_report(
        head_stats={"self": np.full((3, 3), 0.2).tolist()}, mixing_ratios=mixing
    )
    md = render_markdown(encoder)
    assert "- AttnResLn-N: AttnRes-N through the LayerNorm that follows the sum: what" in md
    encoder["meta"]["pre_norm"] = True
    md = render_markdown(encoder)
    assert "- AttnResLn-N: AttnRes-N through the norm that reads the sum next, the FFN's" in md
    assert "ModernBERT's mlp_norm" in md and "what the block passes on" not in md


def test_the_header_names_only_the_weights_computed():
    """With --no-norm there are no norm_* scores: the header does not promise them."""
    md = render_markdown(report())
    assert "(attention weights / norm-based weights, Kobayashi et al. 2020)" not in md
    assert "(attention weights; no norm-based weights (--no-norm))" in md
    norm = {f"norm_{n}": np.full((3, 3), 0.1).tolist() for n in STATS}
    md = render_markdown(report(scores=norm))
    assert "(attention weights / norm-based weights, Kobayashi et al. 2020)" in md
    encoder = encoder_report(head_stats={"self": np.full((3, 3), 0.2).tolist()})
    assert "(attention weights; no norm-based weights (--no-norm))" in render_markdown(encoder)


def test_no_head_stands_out_when_every_head_scores_the_same():
    """A score that is 0 for every head names no strongest head ("0-0 (0.000)" read as
    if head 0-0 were one); a score that varies names its highest head."""
    zero = np.zeros((3, 3)).tolist()
    md = render_markdown(report(scores={"punct": zero}))
    table = md[md.index("Strongest head per score") :]
    assert "| . , | none stands out (every head 0.000) |" in table
    assert "| entropy | 2-2 (0.800) |" in table  # the grid's largest, by hand
    assert "0-0 (0.000)" not in table
    encoder = encoder_report(
        head_stats={"self": zero, "prev": np.arange(9.0).reshape(3, 3).tolist()}
    )
    md = render_markdown(encoder)
    assert "| self | none stands out (every head 0.000) | none stands out" in md
    assert "| prev | 2-2 (8.000) | 0-0 (0.000) |" in md


def test_a_decoders_uniform_ablation_leaves_out_the_first_token_cosine():
    """Made uniform, a decoder's head still gives its first token (which sees only itself)
    all its weight: cos_cls is 1 by construction, so no column, and one line says why;
    zeroed, the first token's output changes: the column stays."""
    ablation = ablation_of(mode="uniform", cos_cls=[1.0] * 9)
    md = render_markdown(report(head_ablation=ablation))
    table = md[md.index("## Head ablation") :]
    assert "| head | cos mean-pooled | LM loss change |" in table
    assert "cos first token" not in table and "1.000" not in table
    assert "No first-token cosine: the first token sees only itself" in table
    md = render_markdown(report(head_ablation={**ablation, "mode": "zero"}))
    assert "| head | cos first token | cos mean-pooled | LM loss change |" in md
    assert "No first-token cosine" not in md
    encoder = {**ablation, "causal": False, "lm_loss": None, "lm_loss_delta": None}
    assert "| head | cos [CLS] | cos mean-pooled |" in render_markdown(
        report(head_ablation=encoder)
    )


def test_none_stands_out_says_which_heads_it_means_when_some_have_no_score():
    from jaxattn.analysis.markdown import _strongest

    equal = np.zeros((2, 2))
    assert _strongest(equal, [0, 1], [0, 1]) == "none stands out (every head 0.000)"
    equal[1, 1] = np.nan  # a head with no score (NaN) is not "every head 0.000"
    assert _strongest(equal, [0, 1], [0, 1]) == ("none stands out (every head with a score 0.000)")
    assert _strongest(np.array([[0.1, np.nan]]), [0], [0, 1]) == "0-0 (0.100)"  # one scored
    assert _strongest(np.full((1, 2), np.nan), [0], [0, 1]) == "none (no head has a score)"
