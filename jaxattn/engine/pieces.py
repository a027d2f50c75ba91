"""Token ids' word pieces from one table of the backend's strings (`Pieces`).

An Encoding's `tokens` makes a new Python string for every token: for 1,024 texts of
128 tokens, 131,072 strings, the largest Python share of tokenising a large capture
(issue 26). A text's pieces are looked up in a table of the vocabulary's strings
instead, built once, wherever the backend's piece for an id is that string. It is
not on these routes, whose ids are left to the backend (`Pieces.tokens` gives None
for a text holding one, and its Encoding's own `tokens` are read):

  - a Unigram model's unknown id: the piece is the unknown text itself;
  - an added token that strips spaces (lstrip, rstrip): the piece holds them;
  - a normalized added token whose normalized content is not its string;
  - a post-processor's special token spelt otherwise than the vocabulary's id;
  - an id with two strings (the model's vocabulary and an added token's), or none.

A model or post-processor of a kind not in `MODELS` or `PROCESSORS`, or a backend
whose parts cannot be read: no table, every text's pieces are the backend's.

A table costs what reading the pieces of 6 to 17 tokens from it saves, for each entry
of the vocabulary (measured on the 2-core CPU: 0.9-2.6 us an entry, MiniLM's 30,522
words 28 ms, 256,000 words 0.4-0.7 s; ~0.15 us a token saved): `Deferred` builds it
once a tokenizer has read `TOKENS_PER_ENTRY` tokens for each entry, so a load's probe,
a server's short requests and one small call do not pay for it.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Sequence

# The models whose piece for an id is the vocabulary's string for it (Unigram's but
# for its unknown id), and the post-processors whose added pieces are named in them.
MODELS = ("WordPiece", "BPE", "WordLevel", "Unigram")
PROCESSORS = ("TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel", "Sequence")
TOKENS_PER_ENTRY = 8


class Pieces:
    """Word pieces by id: `table[id]`, except for a text holding an id in `mixed`."""

    def __init__(self, table: Sequence[str | None] | None, mixed: frozenset[int] = frozenset()):
        self.table, self.mixed = table, mixed

    @classmethod
    def of(cls, backend) -> Pieces:
        """The table of a `tokenizers.Tokenizer`; an empty one (every text read from the
        backend) where one of its parts is of a kind not known here or cannot be read."""
        try:
            return _table(backend)
        except Exception:  # noqa: BLE001 - any part not read as expected: the backend's own pieces
            return cls(None)

    def tokens(self, ids: Sequence[int]) -> tuple[str, ...] | None:
        """The pieces of `ids`, or None where the backend's may differ (read those)."""
        table, mixed = self.table, self.mixed
        if table is None or (mixed and not mixed.isdisjoint(ids)):
            return None
        try:
            if len(ids) > 1:
                return operator.itemgetter(*ids)(table)
            return tuple(table[i] for i in ids)  # itemgetter of one id gives no tuple
        except IndexError:  # an id past the table's (no route names it)
            return None


class Deferred:
    """A backend's `Pieces`: none (every piece read from the backend) until `count` has
    been told of `TOKENS_PER_ENTRY` tokens for each entry of its vocabulary, then its
    table. The first thread past the mark builds it (`_left` is cleared first); the others
    read the backend's pieces until it is set, whole."""

    def __init__(self, backend):
        self._backend, self.pieces = backend, Pieces(None)
        self._left: int | None = TOKENS_PER_ENTRY * backend.get_vocab_size(with_added_tokens=True)
        self._lock = threading.Lock()  # the count, on any Python (free-threaded too)
        self.count(0)

    def count(self, tokens: int) -> None:
        """`tokens` more were read; the table is built when they reach the mark (by
        the thread that got there, outside the lock: the others do not wait for it)."""
        if self._left is None:
            return
        with self._lock:
            if self._left is None:
                return
            self._left -= tokens
            if self._left > 0:
                return
            self._left = None
        self.pieces = Pieces.of(self._backend)


def _table(backend) -> Pieces:
    model = backend.model
    kind = type(model).__name__
    if kind not in MODELS:
        return Pieces(None)
    table: dict[int, str] = {}
    mixed: set[int] = set()

    def put(i: int, piece: str) -> None:
        if table.setdefault(i, piece) != piece:
            mixed.add(i)

    for i, piece in _model_strings(backend, model):
        put(i, piece)
    if kind == "Unigram":
        unk = json.loads(model.__getstate__()).get("unk_id")
        if unk is not None:
            mixed.add(unk)
    normalizer = backend.normalizer
    for i, added in backend.get_added_tokens_decoder().items():
        content = added.content
        if added.normalized and normalizer is not None:
            content = normalizer.normalize_str(content)
        put(i, content)
        if added.lstrip or added.rstrip:
            mixed.add(i)
    processor = backend.post_processor
    if processor is not None:
        specials = _specials(json.loads(processor.__getstate__()))
        if specials is None:
            return Pieces(None)
        for piece, i in specials:
            put(i, piece)
    if not table:
        return Pieces([], frozenset(mixed))
    size = max(table) + 1
    if size > 2 * len(table) + 1024:  # ids spread far apart: no dense table
        return Pieces(None)
    dense: list[str | None] = [None] * size
    for i, piece in table.items():
        dense[i] = piece
    # An id no route names cannot be given; were one given, the backend's piece is read.
    mixed.update(i for i, piece in enumerate(dense) if piece is None)
    return Pieces(dense, frozenset(mixed))


def _model_strings(backend, model):
    """(id, string) of the model's vocabulary. One `id_to_token` call per id, not
    `get_vocab`: that one builds the whole dict holding the GIL (~0.5-0.9 s for 262,144
    entries, every other thread of a server stopped); these let the others run
    between calls. Where the model's strings outnumber the ids found (an id with two
    strings), `get_vocab`'s pairs, so that `put` marks the id mixed."""
    strings = backend.get_vocab_size(with_added_tokens=False)
    to_token = model.id_to_token
    pairs = [(i, s) for i in range(strings) if (s := to_token(i)) is not None]
    if len(pairs) == strings:
        return pairs
    return [(i, s) for s, i in backend.get_vocab(with_added_tokens=False).items()]


def _specials(state: dict) -> list[tuple[str, int]] | None:
    """(piece, id) of every token a post-processor adds; None for a kind not known here."""
    kind = state.get("type")
    if kind not in PROCESSORS:
        return None
    if kind == "ByteLevel":
        return []
    if kind == "Sequence":
        out = []
        for part in state["processors"]:
            specials = _specials(part)
            if specials is None:
                return None
            out += specials
        return out
    if kind == "TemplateProcessing":
        out = []
        for special in state["special_tokens"].values():
            ids, tokens = special["ids"], special["tokens"]
            if len(ids) != len(tokens):
                return None
            out += zip(tokens, ids, strict=True)
        return out
    return [(state[name][0], state[name][1]) for name in ("cls", "sep")]
