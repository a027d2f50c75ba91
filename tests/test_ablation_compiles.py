"""Head ablation of a decoder compiles a bounded set of programs: one forward per
shape of the input (the unablated base runs the ablated runs' program, gates all
open) and one program for the LM loss whatever the example lengths; ablating more
heads compiles nothing more."""

from __future__ import annotations

from compile_events import backend_compiles
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402

import jaxattn
from jaxattn.engine.ablation import head_ablation_study

# Six lengths in one bucket (32): one batch shape.
TEXTS = ["a", "the cat", "the cat sat", "the cat sat on", "the cat sat on the mat", "hello world ."]


def test_ablating_a_decoder_compiles_one_forward_and_one_loss(tmp_path):
    engine = jaxattn.load(make_gpt2_checkpoint(tmp_path), buckets=(32,), max_batch=8)
    lengths = {t.length for t in engine.tokenize(TEXTS)}
    assert len(lengths) == len(TEXTS)  # one LM loss program per length before
    with backend_compiles(("_forward", "_nll_sum")) as compiles:
        res = head_ablation_study(engine, TEXTS, heads=[(0, 0), (1, 2)], mode="uniform")
        head_ablation_study(engine, TEXTS, heads=[(2, 1)], mode="zero")
    assert len(res["lm_loss_delta"]) == 2 and res["lm_loss"] > 0
    forwards = [n for n in compiles if "_forward" in n]
    assert len(forwards) == 1, compiles  # the base's program is the ablated runs'
    assert len(compiles) - len(forwards) <= 1, compiles  # at most one loss program
