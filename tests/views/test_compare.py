"""`jaxattn view --compare`: the numbers (numpy references here), the pairing, the bad inputs.

The page in a browser and the known difference of two tiny models are in
test_compare_browser.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from store_helpers import captures as store_captures  # noqa: E402
from store_helpers import write_store  # noqa: E402

from jaxattn.capture import Capture
from jaxattn.cli import main
from jaxattn.errors import UsageError
from jaxattn.views.compare import js_distance, pair_all, pair_example


def fake(tokens, weights, text=None, layers=(0,), heads=(0,), **tensors) -> Capture:
    """A float32 Capture of `tokens` with [L, H, T, T] (or [T, T]) attention `weights`."""
    w = np.asarray(weights, np.float32)
    w = w if w.ndim == 4 else w[None, None]
    return Capture(
        tokens=tuple(tokens),
        sentence_b_start=None,
        layers=tuple(layers),
        heads=tuple(heads),
        dtype="float32",
        tensors={"attention": w, **tensors},
        text=text,
    )


def js_reference(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon distance per row through entropies: sqrt(H(m) - (H(p) + H(q)) / 2), base 2."""
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)

    def entropy(x):
        return -np.sum(np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0), -1)

    return np.sqrt(np.maximum(entropy((p + q) / 2) - (entropy(p) + entropy(q)) / 2, 0.0))


def random_rows(rng, shape) -> np.ndarray:
    x = rng.random(shape) ** 3  # some near-zero weights
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def causal_rows(rng, shape) -> np.ndarray:
    """Random rows over j <= i (a decoder's), 0 above the diagonal."""
    x = (rng.random(shape) ** 3) * np.tril(np.ones(shape[-2:]))
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def test_two_decoders_are_summarised_over_what_their_rows_see():
    """Two decoders' maps (provenance causal) differ only at j <= i: mean |B - A| is over
    those cells of rows 1 .. T-1 (row 0 is one-hot on token 0 on both sides), by hand
    (sum / count), and so is the Jensen-Shannon mean; a sum over all T² cells would
    halve it. An encoder's pair keeps the documented 1 / T² mean."""
    rng = np.random.default_rng(5)
    t = 6
    tokens = ["<s>", "the", "cat", "sat", "the", "cat"]
    a, b = causal_rows(rng, (1, 2, t, t)), causal_rows(rng, (1, 2, t, t))
    layout = dict(heads=(0, 1))
    decoder = dict(provenance={"causal": True})
    ca = dataclasses.replace(fake(tokens, a, **layout), **decoder)
    cb = dataclasses.replace(fake(tokens, b, **layout), **decoder)
    pair = pair_example(0, ca, cb, "attention", "attention")
    d = np.abs(b.astype(np.float64) - a)
    cells = [(i, j) for i in range(1, t) for j in range(i + 1)]
    want = np.array([[sum(d[0, h, i, j] for i, j in cells) / len(cells) for h in range(2)]])
    assert pair.causal and len(cells) == 20
    np.testing.assert_allclose(pair.mean_abs, want, atol=1e-12)
    js = js_reference(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(pair.js, js[..., 1:].mean(-1), atol=1e-6)
    encoder = dict(provenance={"causal": False})  # (without it, the zeros say causal)
    ea = dataclasses.replace(fake(tokens, a, **layout), **encoder)
    eb = dataclasses.replace(fake(tokens, b, **layout), **encoder)
    enc = pair_example(0, ea, eb, "attention", "attention")
    assert not enc.causal
    np.testing.assert_allclose(enc.mean_abs, d.sum((-2, -1)) / t**2, atol=1e-12)


def test_difference_and_summaries_against_numpy():
    rng = np.random.default_rng(3)
    tokens = ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "x"]
    a, b = random_rows(rng, (2, 3, 7, 7)), random_rows(rng, (2, 3, 7, 7))
    b[0, 1] = a[0, 1]  # one head the same: summaries exactly 0
    b[1, 2, 3] = np.eye(7)[2]  # a one-hot row against a dense one
    layout = dict(layers=(0, 1), heads=(0, 1, 2))
    pair = pair_example(
        0, fake(tokens, a, **layout), fake(tokens, b, **layout), "attention", "attention"
    )
    d = b.astype(np.float64) - a
    assert pair.level == "token" and pair.tokens == tuple(tokens)
    np.testing.assert_allclose(pair.diff, d, atol=1e-12)
    np.testing.assert_allclose(pair.mean_abs, np.abs(d).sum((-2, -1)) / 49, atol=1e-12)
    np.testing.assert_allclose(pair.max_abs, np.abs(d).reshape(2, 3, -1).max(-1), atol=1e-12)
    want = js_reference(a.astype(np.float64), b.astype(np.float64)).mean(-1)
    np.testing.assert_allclose(pair.js, want, atol=1e-6)
    assert pair.mean_abs[0, 1] == 0 and pair.js[0, 1] == 0
    # two one-hot rows on different keys are at the largest distance, 1
    assert js_distance(np.eye(3)[None], np.eye(3)[[1, 2, 0]][None]) == pytest.approx(
        np.ones((1, 3))
    )


def test_norm_kind_is_rows_normalised():
    rng = np.random.default_rng(4)
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    norms = rng.random((1, 1, 4, 4)).astype(np.float32) * 5
    att = random_rows(rng, (1, 1, 4, 4))
    cap = fake(tokens, att, alpha_fx_norm=norms)
    pair = pair_example(0, cap, cap, "attention", "norm")
    want = norms.astype(np.float64) / norms.astype(np.float64).sum(-1, keepdims=True)
    np.testing.assert_allclose(pair.b, want, atol=1e-12)
    np.testing.assert_allclose(pair.a, att, atol=0)


# Hand-computed word level (Clark et al.): W[u, v] = mean over u's pieces of the sum over v's.
A_TOKENS = ["[CLS]", "straw", "##berries", "are", "red", "[SEP]"]
A_ROWS = [
    [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
    [0.1, 0.2, 0.3, 0.1, 0.2, 0.1],
    [0.0, 0.4, 0.1, 0.2, 0.1, 0.2],
    [0.2, 0.1, 0.1, 0.3, 0.2, 0.1],
    [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],
    [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
]
A_WORDS = [
    [0.5, 0.15, 0.15],  # strawberries: mean(.2+.3, .4+.1), mean(.1, .2), mean(.2, .1)
    [0.2, 0.3, 0.2],  # are: .1+.1, .3, .2
    [0.2, 0.1, 0.5],
]
B_TOKENS = ["<s>", "Strawberries", "Ġare", "Ġred", "</s>"]
B_ROWS = [
    [0.6, 0.1, 0.1, 0.1, 0.1],
    [0.1, 0.6, 0.1, 0.1, 0.1],
    [0.2, 0.2, 0.4, 0.1, 0.1],
    [0.3, 0.1, 0.1, 0.4, 0.1],
    [0.6, 0.1, 0.1, 0.1, 0.1],
]
B_WORDS = [[0.6, 0.1, 0.1], [0.2, 0.4, 0.1], [0.1, 0.1, 0.4]]


@pytest.mark.parametrize("text", [None, "Strawberries are red"])
def test_word_level_when_tokenisers_differ(text):
    pair = pair_example(
        0, fake(A_TOKENS, A_ROWS, text), fake(B_TOKENS, B_ROWS, text), "attention", "attention"
    )
    assert pair.level == "word" and pair.tokens == ("strawberries", "are", "red")
    assert pair.sentence_b_start is None
    np.testing.assert_allclose(pair.a[0, 0], A_WORDS, atol=1e-6)
    np.testing.assert_allclose(pair.b[0, 0], B_WORDS, atol=1e-6)


# A contraction BERT splits into three words and RoBERTa into two ("aren", "'t"): the
# common units are "they", "aren't", "here". Hand-computed as above.
C_A_TOKENS = ["[CLS]", "they", "aren", "'", "t", "here", "[SEP]"]
C_A_ROWS = [
    [0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    [0.1, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1],
    [0.2, 0.1, 0.3, 0.1, 0.1, 0.1, 0.1],
    [0.1, 0.1, 0.1, 0.4, 0.1, 0.1, 0.1],
    [0.1, 0.2, 0.1, 0.1, 0.3, 0.1, 0.1],
    [0.1, 0.1, 0.1, 0.1, 0.1, 0.4, 0.1],
    [0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
]
C_A_WORDS = [
    [0.3, 0.4, 0.1],  # they: .3, .2+.1+.1, .1
    [0.4 / 3, 1.6 / 3, 0.1],  # aren't: mean(.1, .1, .2), mean(.5, .6, .5), .1
    [0.1, 0.3, 0.4],
]
C_B_TOKENS = ["<s>", "They", "Ġaren", "'t", "Ġhere", "</s>"]
C_B_ROWS = [
    [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
    [0.2, 0.2, 0.2, 0.2, 0.1, 0.1],
    [0.1, 0.1, 0.3, 0.3, 0.1, 0.1],
    [0.1, 0.2, 0.1, 0.4, 0.1, 0.1],
    [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],
    [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
]
C_B_WORDS = [
    [0.2, 0.4, 0.1],  # they: .2, .2+.2, .1
    [0.15, 0.55, 0.1],  # aren't: mean(.1, .2), mean(.6, .5), .1
    [0.1, 0.2, 0.5],
]


@pytest.mark.parametrize("text", [None, "They aren't here"])
@pytest.mark.parametrize("swap", [False, True])
def test_word_level_merges_words_the_other_side_runs_together(text, swap):
    a = fake(C_A_TOKENS, C_A_ROWS, text), C_A_WORDS, ("they", "aren't", "here")
    b = fake(C_B_TOKENS, C_B_ROWS, text), C_B_WORDS, ("They", "aren't", "here")
    (ca, wa, labels), (cb, wb, _) = (b, a) if swap else (a, b)
    pair = pair_example(0, ca, cb, "attention", "attention")
    assert pair.level == "word" and pair.tokens == labels
    np.testing.assert_allclose(pair.a[0, 0], wa, atol=1e-6)
    np.testing.assert_allclose(pair.b[0, 0], wb, atol=1e-6)
    assert (pair.a.sum(-1) > 0).all() and (pair.b.sum(-1) > 0).all()  # no unit left empty


def test_pairing_refuses_other_texts_counts_and_shapes():
    other = fake(["[CLS]", "dogs", "are", "red", "[SEP]"], np.full((5, 5), 0.2))
    with pytest.raises(
        UsageError,
        match=r"^example 0 differs between A and B: A is "
        r"'strawberries are red', B is 'dogs are red'",
    ):
        pair_all([fake(A_TOKENS, A_ROWS)], [other], "attention", "attention")
    same = fake(B_TOKENS, B_ROWS, "Strawberries are red")
    with pytest.raises(UsageError, match="example 1 differs.*'Strawberries are red'.*'x y'"):
        pair_all([same, same], [same, fake(A_TOKENS, A_ROWS, "x y")], "attention", "attention")
    with pytest.raises(UsageError, match="^A holds 2 examples, B 1"):
        pair_all([other, other], [other], "attention", "attention")
    wide = fake(other.tokens, np.full((2, 1, 5, 5), 0.2), layers=(0, 1))
    with pytest.raises(UsageError, match=r"A holds 1 layer x 1 head \(\[0\] x \[0\]\), B 2 x 1"):
        pair_all([other], [wide], "attention", "attention")
    with pytest.raises(UsageError, match="B holds attention; kind=norm needs alpha_fx_norm"):
        pair_all([other], [other], "attention", "norm")


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_caps) -> dict:
    """Capture files: the tiny BERT's two captures, one without alpha_fx_norm; a store."""
    d = tmp_path_factory.mktemp("compare")
    tiny_caps[0].save(d / "one.npz")
    tiny_caps[1].save(d / "pair.npz")
    att = dataclasses.replace(tiny_caps[0], tensors={"attention": tiny_caps[0].attention})
    att.save(d / "att.npz")
    write_store(d / "store", store_captures(3))
    write_store(d / "empty", [])
    return {
        k: str(d / n)
        for k, n in (
            ("one", "one.npz"),
            ("pair", "pair.npz"),
            ("att", "att.npz"),
            ("store", "store"),
            ("empty", "empty"),
            ("dir", ""),
        )
    }


def run(capsys, *argv) -> tuple[int, str]:
    code = main(["view", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 0 or len(err.splitlines()) == 1, err  # one line, no traceback
    return code, err


def test_saved_capture_against_a_model_output_dtype(saved, checkpoint_dirs, tmp_path):
    from test_compare_browser import read_page

    out = tmp_path / "u.html"
    bert = str(checkpoint_dirs["bert"])
    assert main(["view", "--compare", saved["one"], f"{bert},dtype=uint8", "--out", str(out)]) == 0
    header, arrays = read_page(out)
    assert header["sides"][1].endswith("· attention α · uint8 · precision highest")
    exact = Capture.load(saved["one"]).attention
    np.testing.assert_array_equal(arrays[0]["a"], exact)
    np.testing.assert_allclose(arrays[0]["b"], np.rint(exact * 255) / 255, atol=1e-6)
    err = np.abs(arrays[0]["b"] - exact.astype(np.float64))
    np.testing.assert_allclose(header["examples"][0]["max_abs"], err.max((-2, -1)), atol=1e-7)
    assert err.max() <= 1 / 510 + 1e-7


def test_saved_captures_compare_as_saved(saved, tmp_path, capsys):
    out = tmp_path / "c.html"
    assert (
        run(
            capsys,
            "--compare",
            saved["one"],
            f"{saved['one']},kind=norm",
            "--layers",
            "1",
            "--out",
            str(out),
        )[0]
        == 0
    )
    page = out.read_text(encoding="utf-8")
    assert "one.npz (hf_bert0) · attention α · float32 · precision highest" in page
    assert "one.npz (hf_bert0) · ‖αf(x)‖ rows normalised · float32 · precision highest" in page
    assert '"layers":[1]' in page
    assert (
        run(
            capsys,
            "--compare",
            saved["store"],
            saved["store"],
            "--limit",
            "2",
            "--out",
            str(tmp_path / "s.html"),
        )[0]
        == 0
    )
    assert '"w0_0"' in (tmp_path / "s.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["--compare", "{one}", "{pair}"], 2, "example 0 differs between A and B: A is 'I went"),
        (["--compare", "{one}", "{one},colour=red"], 2, "unknown key 'colour=red'; keys are"),
        (["--compare", "{one}", "{one},kind=weights"], 2, "kind='weights' is not one of"),
        (  # the 0.2 spelling of kind=
            ["--compare", "{one}", "{one},quantity=norm"],
            2,
            "unknown key 'quantity=norm'; keys are precision=, dtype=, kind=",
        ),
        (
            ["x", "--compare", "{dir}", "{dir},precision=fp8"],
            2,
            "precision='fp8' is not one of highest, tf32, bf16",
        ),
        (
            ["--compare", "{one}", "{att},kind=norm"],
            2,
            "att.npz,kind=norm' holds "
            "attention; kind=norm needs alpha_fx_norm: capture it again with --what",
        ),
        (
            ["--compare", "{store},kind=norm", "{one}"],
            2,
            "kind=norm needs alpha_fx_norm: dump it again with --what",
        ),
        (["--compare", "{one}", "{one},dtype=uint8"], 2, "dtype= choose how a model captures"),
        (
            ["--compare", "default", "{one}", "--server", "h:1"],
            2,
            "--server: --compare captures with the local models",
        ),
        (
            ["--compare", "default", "default"],
            2,
            "'default' is a model: give the texts to capture as INPUT",
        ),
        (["x", "--compare", "nowhere", "default"], 2, "'nowhere' is no model directory"),
        (["--compare", "{one}", "{one}", "--global"], 2, "not allowed with argument"),
        (["t", "--compare", "{one}", "{one}"], 2, "saved captures and bring their texts: drop"),
        (
            ["--compare", "{one}", "{one}", "--precision", "bf16"],
            2,
            "A and B are saved captures, compared as saved: drop --precision",
        ),
        (
            ["--compare", "{one}", "{one}", "--attention-block", "64"],
            2,
            "A and B are saved captures, compared as saved: drop --attention-block",
        ),
    ],
)
def test_bad_inputs(saved, tmp_path, capsys, argv, code, message):
    argv = [a.format(**saved) for a in argv]
    got, err = run(capsys, *argv, "--out", str(tmp_path / "c.html"))
    assert got == code and message in err, err
    assert not (tmp_path / "c.html").exists()


def test_empty_store_is_named(saved, tmp_path, capsys):
    for argv in (
        ["--compare", saved["empty"], saved["empty"]],
        ["x", "--compare", "default", saved["empty"]],
    ):
        code, err = run(capsys, *argv, "--out", str(tmp_path / "e.html"))
        side = "A" if argv[0] == "--compare" else "B"
        assert code == 1 and f"--compare {side} '{saved['empty']}' holds no examples" in err, err


def test_two_tokenisers_compare_word_by_word(engines, checkpoint_dirs, tmp_path):
    from test_compare_browser import read_page

    text = "I went to the store."
    out = tmp_path / "w.html"
    bert, roberta = str(checkpoint_dirs["bert"]), str(checkpoint_dirs["roberta"])
    argv = ["view", text, "--compare", bert, roberta, "--layers", "0", "--out", str(out)]
    assert main(argv) == 0
    header, arrays = read_page(out)
    e = header["examples"][0]
    assert e["level"] == "word" and [header["tokens"][k] for k in e["tokens"]] == [
        "i",
        "went",
        "to",
        "the",
        "store",
        ".",
    ]
    cap = engines["bert"].capture([text], layers=[0])[0]
    assert cap.tokens == ("[CLS]", "i", "went", "to", "the", "store", ".", "[SEP]")
    # one piece per word here: the word level is the token level without [CLS] and [SEP]
    np.testing.assert_allclose(arrays[0]["a"], cap.attention[:, :, 1:-1, 1:-1], atol=1e-6)
    roberta = engines["roberta"].capture([text], layers=[0])[0]
    pieces = [i for i, t in enumerate(roberta.tokens) if t not in ("<s>", "</s>")]
    assert len(pieces) == 6
    np.testing.assert_allclose(
        arrays[0]["b"], roberta.attention[:, :, pieces][..., pieces], atol=1e-6
    )
