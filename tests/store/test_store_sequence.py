"""A store indexes like a list of its captures: negative indices, numpy integers,
lazy slices (selections), and errors that name the index, the length and the type."""

from __future__ import annotations

import collections.abc

import numpy as np
import pytest
from store_helpers import captures, write_store

import jaxattn
from jaxattn.store import StoreSelection

COUNT = 5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(the opened store, the plain list of the captures written to it): 3 shards."""
    caps = captures(COUNT)
    path = tmp_path_factory.mktemp("seq") / "s.zarr"
    write_store(path, caps, shard_size=2)
    return jaxattn.open_store(path), caps


def _same(got, want) -> None:
    assert got.tokens == want.tokens
    for q in want.what:
        np.testing.assert_array_equal(got.tensors[q], want.tensors[q], err_msg=q)


def test_integer_indices_match_the_list(pair):
    store, caps = pair
    assert isinstance(store, collections.abc.Sequence) and len(store) == len(caps)
    for i in range(-COUNT, COUNT):
        _same(store[i], caps[i])
    for index in (np.int64(-1), np.int32(2), np.uint8(4)):
        _same(store[index], caps[int(index)])
    assert [c.tokens for c in reversed(store)] == [c.tokens for c in reversed(caps)]


SLICES = [
    slice(1, 3),
    slice(None, None, 2),
    slice(-2, None),
    slice(None, None, -1),
    slice(5, None),
    slice(10, 20),
    slice(-100, 2),
    slice(4, 0, -2),
    slice(np.int64(1), None),
]


@pytest.mark.parametrize("sl", SLICES, ids=str)
def test_slices_match_the_list(pair, sl):
    store, caps = pair
    sel, want = store[sl], caps[sl]
    assert isinstance(sel, StoreSelection) and len(sel) == len(want)
    assert [c.tokens for c in sel] == [c.tokens for c in want]
    for i in range(-len(want), len(want)):
        _same(sel[i], want[i])
    for inner in (slice(1, None), slice(None, None, -1), slice(-1, None)):
        assert [c.tokens for c in sel[inner]] == [c.tokens for c in want[inner]]
    assert [e.record for e in sel.entries] == list(range(COUNT))[sl]


def test_selections_read_nothing_until_indexed(pair, monkeypatch):
    store, _ = pair
    reads = []
    real = type(store).read
    monkeypatch.setattr(
        type(store), "read", lambda self, i, what=None: reads.append(i) or real(self, i, what)
    )
    sel = store[1:][::2][-2:]
    assert reads == [] and len(sel) == 2
    sel[-1]
    assert reads == [3]  # [1, 2, 3, 4] -> [1, 3] -> [1, 3]
    list(sel)
    assert reads == [3, 1, 3]


def test_index_errors_name_the_index_and_the_range(pair):
    store, caps = pair
    for bad in (5, -6, np.int64(7)):
        with pytest.raises(IndexError) as err:
            store[bad]
        with pytest.raises(IndexError):
            caps[bad]  # the same indices a list refuses
        assert str(err.value) == (
            f"index {int(bad)} is out of range: the store holds 5 examples (0..4, or -5..-1)"
        )
    with pytest.raises(
        IndexError,
        match=r"^index 2 is out of range: the selection holds 2 "
        r"examples \(0\.\.1, or -2\.\.-1\)$",
    ):
        store[1:3][2]
    with pytest.raises(IndexError, match="^index 0 is out of range: the selection holds no "):
        store[5:][0]


@pytest.mark.parametrize("key", ["1", 1.0, None, (1, 2)], ids=repr)
def test_other_keys_are_type_errors_naming_the_type(pair, key):
    store, _ = pair
    with pytest.raises(TypeError, match=f"not {type(key).__name__}$"):
        store[key]
    with pytest.raises(TypeError, match=f"not {type(key).__name__}$"):
        store[::2][key]


def test_select_reads_only_the_chosen_quantities(tmp_path):
    from store_helpers import captures, write_store

    import jaxattn

    path = tmp_path / "s.zarr"
    written = captures(5)
    write_store(path, written)
    store = jaxattn.open_store(path)
    sel = store.select(("attention",))
    assert sel.what == ("attention",) and store[1:3].what == store.what
    for got, want in zip(sel[1:], written[1:], strict=True):
        assert got.what == ("attention",)
        np.testing.assert_array_equal(got.attention, want.attention)
    assert store[::2].select(["hidden_states"])[-1].what == ("hidden_states",)
    with pytest.raises(jaxattn.UsageError, match="holds attention, hidden_states, not queries"):
        store.select(("queries",))
    with pytest.raises(jaxattn.UsageError, match="holds attention, hidden_states, not keys"):
        store.read(0, ("keys",))
    # one name is a name, not its letters (as capture(what="attention")); each once
    assert store.select("attention")[0].what == ("attention",)
    assert store.read(-1, "hidden_states").what == ("hidden_states",)
    assert store.select(["attention", "attention"]).what == ("attention",)
    with pytest.raises(jaxattn.UsageError, match="holds attention, hidden_states, not keys: "):
        store[1:].select("keys")
    with pytest.raises(jaxattn.UsageError, match="^no quantity selected: select some of "):
        store.select(())


def test_read_checks_its_index_as_indexing_does(pair):
    store, caps = pair
    _same(store.read(-1), caps[-1])
    with pytest.raises(IndexError, match=r"^index 5 is out of range: the store holds 5 "):
        store.read(5)
    with pytest.raises(TypeError, match="not str$"):
        store.read("1")
