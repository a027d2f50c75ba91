"""Query rows and key positions of the maps (`query_positions`, `key_positions`).

Each selected capture is checked against the whole map of the same model, with no
selection, sliced in numpy: on an encoder (BERT, the session's `full_captures`,
texts of 8 and 2 tokens in one batch), through a saved capture file and a dump
store (a decoder: tests/test_decoder_paths.py; the server:
tests/service/test_service_map_positions.py). The grammar and the errors need no
model. One selected spec (WHAT) is compiled: compiles are the cost here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxattn.errors import UsageError
from jaxattn.quantities import MAPS, QUANTITIES
from jaxattn.selection import positions_of, resolve_positions

ROWS, KEYS = "-2:", "0,-1"  # every standard text has 2 tokens or more ("" is [CLS] [SEP])
# A map over heads, one over all heads of a layer, and what ignores the selection.
WHAT = ("attention", "sum_alpha_fx_norm", "head_stats", "hidden_states")


def sliced(full, name: str, rows, keys, heads=None) -> np.ndarray:
    """The whole map `name` of `full` at `rows` and `keys` (and `heads`), in numpy."""
    x = np.asarray(full.array(name))
    q = QUANTITIES[name]
    if heads is not None and q.head_axis is not None:
        x = np.take(x, heads, axis=q.head_axis)
    if name in MAPS:
        x = np.take(np.take(x, rows, axis=q.axis("T")), keys, axis=q.axis("S"))
    return x


def assert_selected(got, full, heads=None) -> None:
    """`got` holds `full`'s maps at its own positions, everything else whole."""
    n = full.length
    rows = resolve_positions(positions_of(ROWS, "q"), n, "q")
    keys = resolve_positions(positions_of(KEYS, "k"), n, "k")
    assert got.query_positions == rows and got.key_positions == keys
    assert got.tokens == full.tokens
    for name in got.tensors:
        want = sliced(full, name, rows, keys, heads)
        assert got.array(name).shape == want.shape, name
        np.testing.assert_allclose(got.array(name), want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("-4:", (-4, -3, -2, -1)),
        (":3, 7", (0, 1, 2, 7)),
        ([slice(-3, -1), 5], (-3, -2, 5)),
        (range(2, 4), (2, 3)),
        (np.array([4, -1]), (4, -1)),
        (None, None),
    ],
)
def test_positions_take_the_selection_grammar_at_one_count_per_text(value, want):
    assert positions_of(value, "query_positions") == want


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("10:", "runs from each text's start to its end"),
        (":-1", "runs from each text's start to its end"),
        (slice(0, 8, 2), "has a step"),
        ("5:2", "selects no position"),
        ([3, 3], "names position 3 twice"),
        ("0:600", "600 positions, more than the model's longest input (512 tokens)"),
        # counted, not listed first: a MemoryError (or the machine's memory) before
        (range(10**12), "1000000000000 positions, more than the model's longest input"),
        ([5, slice(0, 10**12)], "1000000000001 positions, more than the model's longest"),
        ([1.5], "must hold integers or slices"),
    ],
)
def test_positions_a_text_cannot_hold_at_one_count_are_refused(value, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        positions_of(value, "query_positions", 512)


def test_each_text_resolves_negative_positions_from_its_own_end():
    assert resolve_positions((-3, 0, -1), 10, "query_positions") == (0, 7, 9)
    with pytest.raises(UsageError, match=r"position -11 is outside text 2 of 10 tokens: .*0\.\.9"):
        resolve_positions((-11,), 10, "query_positions", "text 2")
    with pytest.raises(UsageError, match="positions 0 and -10 both name token 0"):
        resolve_positions((0, -10), 10, "key_positions")


def test_capture_and_dump_take_the_positions_negative_ones_included(capsys):
    from jaxattn.cli import build_parser
    from jaxattn.cli.args import join_selections

    parser = build_parser()
    for command in (["capture", "x"], ["dump", "in.txt", "--out", "s.zarr"]):
        argv = [*command, "--query-positions", "-3:", "--key-positions", "-1,0"]
        args = parser.parse_args(join_selections(argv))
        assert args.query_positions == (-3, -2, -1) and args.key_positions == (-1, 0)
    with pytest.raises(SystemExit):
        parser.parse_args(join_selections(["capture", "x", "--query-positions", "10:"]))
    assert "a different count of positions in each" in capsys.readouterr().err


@pytest.fixture(scope="module")
def selected(engines, standard_texts, full_captures):
    """(texts, whole captures, captures of ROWS x KEYS) of BERT, every quantity."""
    texts = standard_texts["bert"][:2]  # 8 and 2 tokens, one batch: one shape to compile
    caps = engines["bert"].capture(texts, what=WHAT, query_positions=ROWS, key_positions=KEYS)
    return texts, full_captures["bert"][:2], caps


def test_the_blockwise_path_gathers_the_selected_heads_rows_and_keys(
    checkpoint_dirs, standard_texts, full_captures
):
    """attention="blockwise" forms the selected heads' maps block by block; the same
    gather keeps their rows and keys: equal to the whole dense maps sliced in numpy."""
    import jaxattn

    engine = jaxattn.load(checkpoint_dirs["bert"], attention="blockwise")
    what = ("attention", "scores", "alpha_fx_norm", "sum_alpha_fx_norm")
    texts = standard_texts["bert"][:2]
    caps = engine.capture(texts, what=what, heads=[1], query_positions=ROWS, key_positions=KEYS)
    for got, full in zip(caps, full_captures["bert"][:2], strict=True):
        rows, keys = list(got.query_positions), list(got.key_positions)
        for name in what:
            want = sliced(full, name, rows, keys, heads=[1])
            np.testing.assert_allclose(got.array(name), want, rtol=1e-4, atol=2e-5)


def test_encoder_maps_hold_the_whole_maps_rows_and_keys_of_each_text(selected):
    texts, full, caps = selected
    assert [c.length for c in caps] == [8, 2]  # in one batch
    for got, want in zip(caps, full, strict=True):
        assert_selected(got, want)
        assert got.attention.shape[-2:] == (2, 2)
        assert got.hidden_states.shape == want.hidden_states.shape  # not a map: whole


def test_the_program_returns_only_the_selected_rows_and_keys(engines, selected):
    """Gathered on the device: the step's outputs, what is copied to the host, are
    [B, L, H, R, S'] (the batches `selected` ran: nothing new to compile)."""
    engine, (texts, _, _) = engines["bert"], selected
    spec = engine.make_spec(WHAT, query_positions=ROWS, key_positions=KEYS)
    tokenized = engine.tokenize(texts)
    layers, heads = engine.config.num_layers, engine.config.num_heads
    for batch in engine.plan(tokenized, spec):
        out = engine.dispatch(batch, tokenized, spec)
        assert out["attention"]["data"].shape == (batch.size, layers, heads, 2, 2)
        assert out["sum_alpha_fx_norm"]["data"].shape == (batch.size, layers, 2, 2)
        assert out["hidden_states"]["data"].shape[2] == batch.length


def test_the_output_sized_by_the_engine_counts_rows_and_keys(engines):
    engine = engines["bert"]
    whole = engine.make_spec(("attention",))
    rows = engine.make_spec(("attention",), query_positions="-4:", key_positions=":8")
    assert engine.output_bytes(rows, 64) * 64 * 64 == engine.output_bytes(whole, 64) * 4 * 8


def test_a_saved_capture_says_which_rows_and_keys_its_maps_hold(selected, tmp_path):
    from jaxattn import Capture

    _, full, caps = selected
    caps[0].save(tmp_path / "rows.npz")
    meta = json.loads(str(np.load(tmp_path / "rows.npz")["__meta__"]))
    assert meta["format"] == "jaxattn.capture/3"  # format 2 readers refuse it
    back = Capture.load(tmp_path / "rows.npz")
    assert_selected(back, full[0])
    full[0].save(tmp_path / "whole.npz")
    assert Capture.load(tmp_path / "whole.npz").query_positions is None
    assert "query_positions=[6:8], key_positions=[0, 7]" in repr(back)


def test_views_and_analyses_refuse_selected_rows_in_one_line(selected):
    from jaxattn.analysis.weights import capture_weights
    from jaxattn.views.segments import segments_document
    from jaxattn.views.svg import to_svg

    _, _, caps = selected
    calls = (
        lambda: to_svg(caps[0], "head"),
        lambda: capture_weights(caps[0]),
        lambda: segments_document(caps[0]),
    )
    for call in calls:
        with pytest.raises(UsageError, match=r"needs whole \[T, S\] maps; this capture holds"):
            call()


def test_a_dump_store_records_and_reads_back_the_rows_and_keys(
    selected, checkpoint_dirs, engines, tmp_path
):
    from jaxattn.dump import DumpOptions, run_dump
    from jaxattn.store import open_store

    texts, _, caps = selected
    kept = [i for i, t in enumerate(texts) if t]  # an empty text is a bad record in a file
    corpus = tmp_path / "in.jsonl"
    records = [
        {"text": t} if isinstance(t, str) else {"text": t[0], "text_b": t[1]}
        for t in (texts[i] for i in kept)
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "store.zarr"
    options = DumpOptions(
        input=corpus,
        out=str(out),
        what=WHAT,
        query_positions=positions_of(ROWS, "q"),
        key_positions=positions_of(KEYS, "k"),
        quiet=True,
    )
    run_dump(engines["bert"], options, model_dir=checkpoint_dirs["bert"])
    store = open_store(out)
    assert store.metadata["format_version"] == 2
    assert store.metadata["spec"]["query_positions"] == [-2, -1]
    assert store.metadata["sizes"]["rows"] == 2 and store.metadata["sizes"]["keys"] == 2
    for got, cap in zip(store, [caps[i] for i in kept], strict=True):
        assert got.query_positions == cap.query_positions
        assert got.key_positions == cap.key_positions
        for name, array in cap.tensors.items():
            np.testing.assert_allclose(got.tensors[name], array, rtol=1e-5, err_msg=name)


def test_a_dump_names_a_record_too_short_for_its_positions(checkpoint_dirs, engines, tmp_path):
    from jaxattn.dump import DumpOptions, run_dump
    from jaxattn.errors import InputError

    corpus = tmp_path / "in.txt"
    corpus.write_text("the cat sat on the mat\n")
    out = tmp_path / "store.zarr"
    options = DumpOptions(input=corpus, out=str(out), query_positions=(-60,), quiet=True)
    with pytest.raises(InputError, match=r"in.txt:1.*query_positions position -60 is outside"):
        run_dump(engines["bert"], options, model_dir=checkpoint_dirs["bert"])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            dict(query_positions=[-30]),
            r"query_positions position -30 is outside text 0 of 8 tokens",
        ),
        (dict(key_positions=[0, -2]), r"positions 0 and -2 both name token 0 of text 1 of 2"),
        (dict(what="head_stats", query_positions=[0]), "this capture asks for none"),
        (dict(query_positions="3:"), "a different count of positions in each"),
    ],
)
def test_the_engine_refuses_positions_a_text_lacks_before_anything_runs(engines, kwargs, words):
    with pytest.raises(UsageError, match=words):
        engines["bert"].capture(["the cat sat on the mat", ""], **kwargs)


def test_capture_iter_names_a_text_lacking_positions_by_its_place_in_the_input():
    from jaxattn.stream import shifted

    error = UsageError("query_positions position -30 is outside text 1 of 8 tokens: ...")
    error.index = 1
    moved = shifted(error, 256)  # text 1 of the window that starts at input 256
    assert isinstance(moved, UsageError) and moved.index == 257
    assert str(moved).startswith("query_positions position -30 is outside text 257 of 8")
