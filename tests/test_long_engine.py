"""Long inputs through the engine (`jaxattn.load(attention=...)`, issue 31): a tiny random
ModernBERT with 4,096 positions and one ~4,000-token text. `head_stats` runs blockwise
under attention="auto" and equals the dense path's (a subprocess each, which also
measures the growth of its peak RSS during the long capture: the dense path holds
[H, T, T] maps, the blockwise one blocks); the batches of a statistics-only request
hold several long examples blockwise, one dense; "blockwise" refuses what it does not
serve by name, and serves a selected head's map."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from modernbert_fixture import make_modernbert_checkpoint  # noqa: E402

import jaxattn  # noqa: E402
from jaxattn.engine import HeadAblation, blockwise  # noqa: E402
from jaxattn.engine.tokenize import TokenizedText  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
POSITIONS, HEADS, LAYERS = 4096, 2, 2  # layer 0 global, layer 1 local
SENTENCE = "She went to the market and bought fresh bread, milk and strawberries. "

# One capture in a fresh process: a short warm-up text first, then the long text;
# prints how far the resident set peaked above where it stood just before the long
# capture (the peak reset through /proc/self/clear_refs, so an earlier peak of the
# process, its compiles or the warm-up, cannot hide it) and writes head_stats.
SCRIPT = """
import json, sys
import numpy as np
import jaxattn

def kib(field):  # from /proc/self/status: VmRSS now, VmHWM the peak since the last reset
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

path, attention, text, out = sys.argv[1:5]
engine = jaxattn.load(path, attention=attention, buckets=(64,))
engine.capture(["a short warm-up text."], what="head_stats")
before = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # the peak restarts here (Linux >= 4.0)
    f.write("5")
cap = engine.capture([text], what="head_stats")[0]
np.save(out, cap.head_stats)
print(json.dumps({"grown_kib": kib("VmHWM") - before, "length": cap.length}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_modernbert_checkpoint(
        tmp_path_factory.mktemp("long-mb"),
        max_position_embeddings=POSITIONS,
        num_attention_heads=HEADS,
        num_hidden_layers=LAYERS,
        hidden_size=12,  # K = 6: RoPE needs it even
        local_attention=40,
    )


@pytest.fixture(scope="module")
def long_text(checkpoint):
    engine = jaxattn.load(checkpoint)
    text = SENTENCE * 200
    ids = engine.tokenizer.encode([text])[0].ids
    assert POSITIONS - 400 < len(ids) <= POSITIONS, len(ids)  # ~4,000 tokens
    return text


def capture_in_a_subprocess(checkpoint, attention, text, tmp_path):
    out = tmp_path / f"{attention}.npy"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(checkpoint), attention, text, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), np.load(out)


def test_long_statistics_run_blockwise_equal_dense_in_far_less_memory(
    checkpoint, long_text, tmp_path
):
    auto, blocked = capture_in_a_subprocess(checkpoint, "auto", long_text, tmp_path)
    dense, reference = capture_in_a_subprocess(checkpoint, "dense", long_text, tmp_path)
    assert auto["length"] == dense["length"] > POSITIONS - 400
    assert blocked.shape == reference.shape == (LAYERS, HEADS, reference.shape[-1])
    np.testing.assert_allclose(blocked, reference, rtol=1e-4, atol=2e-5)
    # Dense: a layer's [2, 4096, 4096] float32 logits are 128 MiB, several live at once
    # (2.2 GB measured); blockwise: 70 MB.
    assert dense["grown_kib"] > 500 << 10, dense
    assert auto["grown_kib"] < dense["grown_kib"] / 4, (auto, dense)


def test_the_policy_of_a_long_statistics_request_and_its_batches(checkpoint):
    budget = 200 << 20  # bytes of attention logits per batch
    engine = jaxattn.load(checkpoint, attention="auto", attention_budget=budget)
    dense = jaxattn.load(checkpoint, attention="dense", attention_budget=budget)
    assert engine.budgets.attention_bytes == budget
    spec = engine.make_spec("head_stats")
    assert engine.step.block_for(spec, POSITIONS) == blockwise.BLOCK
    assert engine.step.block_for(spec, blockwise.AUTO_MIN_LENGTH_STATS - 1) == 0  # short
    assert dense.step.block_for(spec, POSITIONS) == 0
    texts = [
        TokenizedText(ids=(0,) * n, type_ids=(0,) * n, tokens=("",) * n, sentence_b_start=None)
        for n in (4000, 3990, 4001, 3600)  # one bucket: 4,096
    ]
    # 16k tokens (the CPU's budget) hold four examples of 4,096 blockwise ([2, 256, 256]
    # logits each); the dense path's [2, 4096, 4096] float32 logits (128 MiB) allow one.
    assert [b.size for b in engine.plan(texts, spec)] == [4]
    assert [b.size for b in dense.plan(texts, spec)] == [1] * 4


def test_blockwise_refuses_what_it_cannot_serve_by_name(checkpoint):
    engine = jaxattn.load(checkpoint, attention="blockwise", buckets=(16,))
    with pytest.raises(
        jaxattn.UsageError, match=r"attention='blockwise' cannot run .*: attn_res_norm needs"
    ):
        engine.capture(["a short text"], what=("attn_res_norm", "head_stats"))
    with pytest.raises(
        jaxattn.UsageError, match="attn_res_ln_norm, mixing_ratio need the dense path"
    ):
        engine.capture(["a short text"], what=("mixing_ratio", "attn_res_ln_norm"))
    with pytest.raises(jaxattn.UsageError, match="heads ablated run the dense path"):
        engine.capture(["a short text"], what="head_stats", ablation=HeadAblation.of([(0, 1)]))
    # blockwise at any length: statistics, and a map of the heads asked for only
    what = ("attention", "sum_alpha_fx_norm", "head_stats")
    short = engine.capture(["a short text"], what=what, heads=[1])[0]
    reference = jaxattn.load(checkpoint, attention="dense", buckets=(16,))
    want = reference.capture(["a short text"], what=what, heads=[1])[0]
    assert short.attention.shape == want.attention.shape == (LAYERS, 1, short.length, short.length)
    for name in what:
        np.testing.assert_allclose(getattr(short, name), getattr(want, name), rtol=1e-4, atol=2e-5)


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory):
    from jaxattn.bench.synthetic import tiny_checkpoint

    return tiny_checkpoint("llama", tmp_path_factory.mktemp("llama"))


# Two texts of different lengths in one batch (the shorter padded): 13+ and 7+ tokens.
TEXTS = [
    "At the store, I bought fresh strawberries and a loaf of bread.",
    "I went to the store.",
]


@pytest.mark.parametrize("family", ["bert", "llama"])
@pytest.mark.parametrize("block", [5, 4096], ids=["odd-below-T", "over-T"])
def test_the_attention_block_gives_the_dense_numbers(
    family, block, checkpoint_dirs, llama_checkpoint
):
    """attention_block=5 (odd, under T: several blocks, the last part-filled) and one over
    T (a single block): the maps and head statistics of the dense path, padding included."""
    path = llama_checkpoint if family == "llama" else checkpoint_dirs["bert"]
    stats = "decoder_head_stats" if family == "llama" else "head_stats"
    what = ("attention", stats)
    engine = jaxattn.load(path, attention="blockwise", attention_block=block, buckets=(24,))
    assert engine.step.block_for(engine.make_spec(what), 24) == block
    got = engine.capture(TEXTS, what=what)
    want = jaxattn.load(path, attention="dense", buckets=(24,)).capture(TEXTS, what=what)
    assert got[0].length > 12 and got[1].length < got[0].length  # padded in one batch
    for a, b in zip(got, want, strict=True):
        assert a.length == b.length
        for name in what:
            assert not np.isnan(getattr(b, name)).all(), name
            np.testing.assert_allclose(
                getattr(a, name), getattr(b, name), rtol=1e-4, atol=2e-5, err_msg=name
            )


@pytest.mark.parametrize(
    "block, error",
    [
        (0, "attention_block must be at least 1, got 0"),
        (-3, "attention_block must be at least 1, got -3"),
        (True, "attention_block must be a whole number of tokens, got True"),
        (64.0, "attention_block must be a whole number of tokens, got 64.0"),
        ("256", "attention_block must be a whole number of tokens, got '256'"),
    ],
)
def test_a_bad_attention_block_is_refused_by_name(checkpoint_dirs, block, error):
    with pytest.raises(jaxattn.UsageError, match=f"^{error}$"):
        jaxattn.load(checkpoint_dirs["bert"], attention_block=block)


def test_the_attention_budget_counts_the_engine_s_block(checkpoint):
    """One example's attention working memory on the blockwise path: a layer's float32
    logits of one block, H x block^2 x 4 bytes, at the engine's block size."""
    spec_of = {}
    for block in (None, 96, 1000):
        engine = jaxattn.load(checkpoint, attention="blockwise", attention_block=block)
        spec = spec_of.setdefault("stats", engine.make_spec("head_stats"))
        side = block or 256
        assert engine.pipeline.attention_bytes(spec, POSITIONS) == HEADS * side * side * 4
    # a block over the padded length holds that length's [H, T, T] logits
    assert engine.pipeline.attention_bytes(spec, 512) == HEADS * 512 * 512 * 4


def test_an_unknown_attention_is_refused_by_name(checkpoint):
    need = "unknown attention 'flash': valid are auto, dense"
    with pytest.raises(jaxattn.UsageError, match=need):
        jaxattn.load(checkpoint, attention="flash")


def test_the_load_options_docs_python_names_are_the_engines():
    # docs/python.md lists the engine options `jaxattn.load` takes; the Engine's
    # signature is the one list (`load` forwards **engine_options to it).
    import inspect
    import re

    text = (ROOT / "docs" / "python.md").read_text()
    paragraph = text[text.index("`jaxattn.load` also takes the engine's options") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    named = set(re.findall(r"`(\w+)=`", paragraph))
    options = set(inspect.signature(jaxattn.Engine).parameters) | set(
        inspect.signature(jaxattn.load).parameters
    )
    assert {
        "attention",
        "attention_budget",
        "attention_block",
        "layer_loop",
        "host_memory",
    } <= named
    assert named <= options, named - options
