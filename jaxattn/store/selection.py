"""Indexing a store like a list: negative indices, slices, lazy selections.

``store[i]`` reads one example; ``store[1:3]``, ``store[::2]``, ``store[-2:]``
give a `StoreSelection`: a read-only sequence of the selected examples that reads
nothing until one of them is indexed or iterated (a store may hold millions).
Selections slice further (``store[::2][1:]``) without reading either. Indices are
anything with ``__index__`` (int, numpy integers), checked against the length
with a message that names the index and the valid range.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence

from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.selection import out_of_range


def position(key, length: int, holder: str) -> int:
    """The non-negative position of the integer index `key` in a sequence of `length`.

    Args:
      key: an int, numpy integer or anything with ``__index__``; negative counts
        from the end.
      length: the sequence's length.
      holder: what holds the examples, for messages ("the store", "the selection").

    Raises:
      TypeError: `key` is not an integer (slices are handled by the callers).
      IndexError: `key` is out of range, naming it and the valid range.
    """
    try:
        index = operator.index(key)
    except TypeError:
        raise TypeError(
            f"{holder} is indexed by integers or slices (store[3], store[-1], store[1:3]),"
            f" not {type(key).__name__}"
        ) from None
    if not -length <= index < length:
        raise IndexError(out_of_range(index, length, holder))
    return index % length


def check_held(location, held: Sequence[str], what: str | Sequence[str]) -> tuple[str, ...]:
    """The quantities `what` (a single name is accepted, as `capture(what=)`), each once,
    refusing any that a store holding `held` lacks.

    Raises:
      UsageError: none named; or naming the store, what it holds and what it lacks.
    """
    what = tuple(dict.fromkeys([what] if isinstance(what, str) else what))
    if not what:
        raise UsageError(f"no quantity selected: select some of {', '.join(held)}")
    missing = [q for q in what if q not in held]
    if missing:
        raise UsageError(
            f"the store at {location} holds {', '.join(held)}, not {', '.join(missing)}:"
            " select quantities it holds"
        )
    return what


class StoreSelection(Sequence):
    """A lazy, read-only selection of a store's examples (``store[1:3]``, ``store[::2]``).

    ``len(sel)``, ``sel[i]`` (negative too), ``sel[a:b:c]`` (another selection)
    and iteration work as for a list; each example is read from the store when
    it is indexed. Its captures are the store's (`jaxattn.store.Store`).

    Attributes:
      store: the store it selects from.
      indices: the selected store indices, a `range`.
      what: the quantities its captures hold.
    """

    def __init__(self, store, indices: range, what=None):
        if what is not None:
            what = check_held(store.location, store.what, what)
        self.store, self.indices, self._what = store, indices, what

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key) -> Capture | StoreSelection:
        if isinstance(key, slice):
            return StoreSelection(self.store, self.indices[key], self._what)
        index = self.indices[position(key, len(self), "the selection")]
        return self.store.read(index, self._what)

    def __iter__(self) -> Iterator[Capture]:
        for index in self.indices:
            yield self.store.read(index, self._what)

    @property
    def what(self) -> tuple[str, ...]:
        """The quantities its captures hold (the selected ones, else all the store holds)."""
        return self._what if self._what is not None else self.store.what

    def select(self, what) -> StoreSelection:
        """The same examples, their captures holding only the quantities `what`."""
        return StoreSelection(self.store, self.indices, what)

    @property
    def metadata(self) -> dict:
        """The store's metadata (model, spec, input; STORE.md)."""
        return self.store.metadata

    @property
    def entries(self) -> list:
        """The manifest entries of the selected examples (`jaxattn.store.manifest.Entry`)."""
        return [self.store.entries[i] for i in self.indices]

    def __repr__(self) -> str:
        return f"StoreSelection({self.store.location!r}, {len(self)} examples: {self.indices})"
