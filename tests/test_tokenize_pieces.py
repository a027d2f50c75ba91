"""`Tokenizer.encode` against the backend's own Encodings, text by text, for every kind
of fast tokenizer the fixtures build (WordPiece, byte-level BPE, Unigram, BOS-adding,
an lstrip [MASK]) and for each route on which a piece is not the vocabulary's string
(`jaxattn.engine.pieces`): EWT dev sentences, odd texts, pairs, too-long texts."""

from __future__ import annotations

import types

import pytest
from tokenizers import AddedToken, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

from jaxattn.engine import pieces
from jaxattn.engine.pieces import Pieces
from jaxattn.engine.tokenize import Tokenizer
from jaxattn.inputs.arguments import SAMPLE_CORPUS

LIMIT = 40


@pytest.fixture(autouse=True)
def _table_at_once(monkeypatch):
    """The table from the first call (`pieces.Deferred` waits for it to pay otherwise)."""
    monkeypatch.setattr(pieces, "TOKENS_PER_ENTRY", 0)


ODD = [
    "",
    " ",
    "\t\n",
    "a",
    "Hello World",
    "héllo wörld café naïve ¿Qué?",
    "日本語のテキスト 中文",
    "emoji 😀👍🏽 ok",
    "e\u0301 combining, zero\u200bwidth, ctrl\x07char",
    "Ελληνικά кириллица עברית العربية",
    "[CLS] [SEP] [MASK] [UNK] <s> </s> <mask> <unk> <|endoftext|> [X]",
    "hello <Mask> worlds, hello <r>   world",
    "hello FooBar foobar Hello HELLO",
    "xyz qq",
    " ".join(["store"] * 60),
    "x" * 300,
]


def _ewt(n: int) -> list[str]:
    prefix = "# text = "
    with open(SAMPLE_CORPUS, encoding="utf-8") as f:
        lines = [line[len(prefix) :].rstrip("\n") for line in f if line.startswith(prefix)]
    return lines[:n]


TEXTS = _ewt(150) + ODD
PAIRS = [
    (a, b) for a in ("", "hello world", TEXTS[0]) for b in ("", "Foo bar.", " ".join(["w"] * 50))
]


def _routes() -> Backend:
    """WordPiece with an added token on each route: lstrip, rstrip, normalized, plain;
    a template whose [X] is the vocabulary's [CLS] (`template` False: spelt [CLS])."""
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "##s": 3, "[CLS]": 4, "[SEP]": 5, "foo": 6}
    t = Backend(models.WordPiece(vocab, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.add_tokens(
        [
            AddedToken("<Mask>", lstrip=True, normalized=False),
            AddedToken("<r>", rstrip=True, normalized=False),
            AddedToken("FooBar", normalized=True),
            AddedToken("Hello", normalized=False),
        ]
    )
    return t


def _with_template(t: Backend, cls: str) -> Backend:
    t.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A [SEP]",
        pair=f"{cls} $A [SEP] $B:1 [SEP]:1",
        special_tokens=[(cls, 4), ("[SEP]", 5)],
    )
    return t


def _unigram() -> Backend:
    vocab = [("<unk>", 0.0), ("▁a", -1.0), ("a", -1.5), ("b", -2.0), ("▁", -3.0)]
    u = Backend(models.Unigram(vocab, unk_id=0, byte_fallback=False))
    u.pre_tokenizer = pre_tokenizers.Metaspace()
    return u


def _backends() -> dict:
    import deberta_fixture
    import family_fixtures
    import gpt2_fixture
    import hf_fixtures
    import llama_fixture
    import modernbert_fixture

    from jaxattn.checkpoints import default_model_dir

    return {
        "minilm": lambda: Backend.from_file(str(default_model_dir() / "tokenizer.json")),
        "roberta": lambda: hf_fixtures.make_tokenizer("roberta").backend_tokenizer,
        "albert": lambda: family_fixtures.make_family_tokenizer("albert").backend_tokenizer,
        "gpt2": lambda: gpt2_fixture.make_gpt2_tokenizer().backend_tokenizer,
        "llama": lambda: llama_fixture.make_llama_tokenizer().backend_tokenizer,
        "deberta": lambda: deberta_fixture.make_deberta_tokenizer().backend_tokenizer,
        "modernbert": lambda: modernbert_fixture.make_modernbert_tokenizer().backend_tokenizer,
        "routes": lambda: _with_template(_routes(), "[CLS]"),
        "routes-template": lambda: _with_template(_routes(), "[X]"),
        "unigram-bare": _unigram,
    }


def _tokenizer(backend: Backend, causal: bool = False) -> Tokenizer:
    config = types.SimpleNamespace(max_length=LIMIT, causal=causal, family="test")
    return Tokenizer(types.SimpleNamespace(backend_tokenizer=backend), config)


def _reference(backend: Backend):
    """What the backend itself gives for one text, cut at LIMIT where it is longer."""
    plain, cut = Backend.from_str(backend.to_str()), Backend.from_str(backend.to_str())
    for b in (plain, cut):
        b.no_truncation()
        b.no_padding()
    cut.enable_truncation(LIMIT, strategy="longest_first")

    def encode(text) -> tuple:
        args = text if isinstance(text, tuple) else (text,)
        e = plain.encode(*args, add_special_tokens=True)
        truncated = len(e.ids) > LIMIT
        if truncated:
            e = cut.encode(*args, add_special_tokens=True)
        b = None
        if isinstance(text, tuple):
            ones = [j for j, s in enumerate(e.sequence_ids) if s == 1]
            b = ones[0] if ones else len(e.ids) - 1
        return tuple(e.ids), tuple(e.type_ids), tuple(e.tokens), b, truncated

    return encode


@pytest.mark.parametrize("name", list(_backends()))
def test_encode_is_the_backends_own_encoding(name):
    backend = _backends()[name]()
    texts = TEXTS + ([] if name == "llama" else PAIRS)
    got = _tokenizer(backend).encode(texts, too_long="truncate")
    reference = _reference(backend)
    want = [reference(t) for t in texts]
    for text, g, w in zip(texts, got, want, strict=True):
        assert (g.ids, g.type_ids, g.tokens, g.sentence_b_start, g.truncated) == w, text
        assert g.text == text and g.length == len(w[0])
    skipped = _tokenizer(backend).encode(texts, too_long="skip")
    assert [s is None for s in skipped] == [w[4] for w in want]


def test_the_table_gives_shared_strings_where_the_backend_would_give_the_same():
    tok = _tokenizer(_backends()["minilm"]())
    a, b = tok.encode(["the store", "a store"])
    assert a.tokens == ("[CLS]", "the", "store", "[SEP]") and a.tokens[2] is b.tokens[2]


@pytest.mark.parametrize(
    "name, mixed",
    [
        ("minilm", set()),
        ("unigram-bare", {0}),  # the unknown id: its piece is the unknown text
        ("routes", {7, 8}),  # <Mask> (lstrip) and <r> (rstrip) hold the stripped spaces
        ("routes-template", {4, 7, 8}),  # and the template's [X] is the vocabulary's [CLS]
    ],
)
def test_ids_left_to_the_backend(name, mixed):
    pieces = Pieces.of(_backends()[name]())
    assert pieces.table is not None and set(pieces.mixed) == mixed
    if name == "routes":  # FooBar (normalized) is read as "foobar", Hello as itself
        assert pieces.table[9] == "foobar" and pieces.table[10] == "Hello"


def test_an_added_token_spelt_as_another_id_of_the_vocabulary_is_left_to_the_backend():
    t = Backend(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    assert set(Pieces.of(t).mixed) == {1, 2}
    got = _tokenizer(t).encode(["hello world there"])[0]
    assert got.tokens == ("[CLS]", "hello", "world", "[UNK]", "[SEP]")


def test_a_backend_not_read_as_expected_has_no_table():
    assert Pieces.of(object()).table is None
    assert Pieces(None).tokens([1, 2]) is None
    t = _unigram()
    t.post_processor = processors.ByteLevel()
    assert Pieces.of(t).table is not None
    assert Pieces(["a", "b"]).tokens([0, 5]) is None  # an id past the table


def test_the_table_is_built_once_the_tokens_read_pay_for_it(monkeypatch):
    monkeypatch.setattr(pieces, "TOKENS_PER_ENTRY", 2)
    tok = _tokenizer(_backends()["routes"]())  # 7 words and 4 added tokens: built at 22
    first = tok.encode(["hello world"])[0]  # [CLS] hello world [SEP]: 4 tokens a call
    for _ in range(4):  # 20 tokens read
        assert tok.encode(["hello world"])[0].tokens[1] is not first.tokens[1]
    tok.encode(["hello world"])  # 24: built after this call
    a, b = tok.encode(["hello world", "hello"])
    assert a.tokens == ("[CLS]", "hello", "world", "[SEP]") and a.tokens[1] is b.tokens[1]


class _NoDict:
    """A backend whose `get_vocab` is refused: the table must come from `id_to_token`."""

    def __init__(self, backend):
        self._b = backend

    def __getattr__(self, name):
        return getattr(self._b, name)

    def get_vocab(self, with_added_tokens=True):
        raise AssertionError("get_vocab builds the whole dict holding the GIL")


@pytest.mark.parametrize("name", ["minilm", "gpt2", "albert", "routes"])
def test_the_table_is_read_id_by_id_not_from_one_dict(name):
    backend = _backends()[name]()
    table = Pieces.of(_NoDict(backend)).table
    assert table is not None
    n = backend.get_vocab_size(with_added_tokens=False)  # the model's, not normalized
    assert table[:n] == [backend.model.id_to_token(i) for i in range(n)]


def test_an_id_with_two_strings_or_a_gap_is_left_to_the_backend():
    vocab = {"[UNK]": 0, "a": 1, "b": 1, "c": 3, "d": 4}  # two strings for 1, none for 2
    t = Backend(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    assert {1, 2} <= set(Pieces.of(t).mixed)
    reference = Backend.from_str(t.to_str())  # what `Tokenizer` reads: the JSON's
    for text in ["a b c d", "b", "c d x"]:
        want = tuple(reference.encode(text).tokens)
        assert _tokenizer(t).encode([text])[0].tokens == want, text


def test_threads_counting_together_build_the_table_once(monkeypatch):
    """Eight threads counting tokens at once: no count lost or raised (None - int), and
    the table built once, by the thread that reached the mark (CPython 3.11's lock
    alone keeps this too; the count's own lock keeps it on a free-threaded build)."""
    import sys
    import threading

    class FakeBackend:
        def get_vocab_size(self, with_added_tokens):
            return 1000

    built = []
    monkeypatch.setattr(
        pieces.Pieces, "of", classmethod(lambda cls, b: built.append(b) or cls(None))
    )
    deferred = pieces.Deferred(FakeBackend())
    errors = []

    def read():
        try:
            for _ in range(2000):
                deferred.count(1)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and len(built) == 1  # 16,000 tokens past the mark of 8,000
