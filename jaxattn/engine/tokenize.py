"""Texts -> token ids (`TokenizedText`), with the input checks every entry point shares."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Sequence
from pathlib import Path

from jaxattn.config import ModelConfig
from jaxattn.engine.pieces import Deferred
from jaxattn.errors import CheckpointError, InputError, TooLongError, UsageError
from jaxattn.inputs import TOO_LONG, Text, check_text


def unknown_id(token_id: int) -> str:
    """The word piece shown for a token id the tokenizer has none for: "<id 50300>"."""
    return f"<id {token_id}>"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizedText:
    """One tokenised example: what the engine batches.

    Attributes:
      ids: token ids, special tokens included.
      type_ids: token type (segment) ids, 0 for sentence A and 1 for B.
      tokens: the word pieces.
      sentence_b_start: index of sentence B's first token, or None.
      text: the text it came from.
      truncated: the text was cut to the model's maximum length.
      generated_start: index of the first token a decoder generated after the text
        (`jaxattn.engine.generate`), or None.
      stop: why that continuation ended, one of `jaxattn.continuations.STOPS`
        (`Generation.stop`), or None where nothing was generated.
    """

    ids: tuple[int, ...]
    type_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    sentence_b_start: int | None
    text: Text | None = None
    truncated: bool = False
    generated_start: int | None = None
    stop: str | None = None

    @functools.cached_property
    def length(self) -> int:
        """len(ids), counted once (batching and unpacking ask it per example many times)."""
        return len(self.ids)


def check_texts(texts) -> list[Text]:
    """Validate the texts argument: a list of strings or (a, b) string pairs.

    Raises:
      UsageError: not a list, or an entry that is no string or pair (named by index).
      InputError: a text holding a lone surrogate (an undecodable byte of a
        non-UTF-8 argument or file), named by index and character.
    """
    if isinstance(texts, (str, bytes)):
        raise UsageError(
            "texts must be a list of strings or (a, b) pairs, not a single string:"
            " wrap it in a list"
        )
    if not isinstance(texts, Sequence):
        raise UsageError(f"texts must be a list, got {type(texts).__name__}")
    return [check_text(t, i) for i, t in enumerate(texts)]


class Tokenizer:
    """The checkpoint's HF fast tokenizer, with no truncation or padding of its own.

    Framework-default trap: a tokenizer.json can carry its own truncation and
    padding (all-MiniLM-L6-v2's truncates at 128 and pads to 128), which would
    silently cut long texts; both are switched off and length is checked here.
    Two private copies of the backend, one never truncating and one truncating
    at the model's limit, so no call mutates shared state: `encode` is safe to
    call from several threads.
    """

    def __init__(
        self, hf_tokenizer, config: ModelConfig, *, backend: str | None = None, load_hf=None
    ):
        """`hf_tokenizer`: the checkpoint's transformers tokenizer; or None with its
        backend's JSON (`backend`) and `load_hf`, which reads the transformers one
        when something first asks for it (`hf`)."""
        from tokenizers import Tokenizer as Backend

        self._hf, self._load_hf, self._lock = hf_tokenizer, load_hf, threading.Lock()
        self.config = config
        self.backend_json = backend or hf_tokenizer.backend_tokenizer.to_str()
        self._backend = Backend.from_str(self.backend_json)
        self._backend.no_truncation()
        self._backend.no_padding()
        self._truncating = Backend.from_str(self.backend_json)
        self._truncating.no_padding()
        self._truncating.enable_truncation(config.max_length, strategy="longest_first")
        self._pieces = Deferred(self._backend)  # the word pieces' table, once it pays

    @classmethod
    def from_dir(cls, path: Path, config: ModelConfig) -> Tokenizer:
        """Load the tokenizer files of a local checkpoint directory.

        Raises:
          FileNotFoundError: the directory has no tokenizer files.
        """
        names = ("tokenizer.json", "vocab.txt", "vocab.json")
        if not any((path / n).is_file() for n in names):
            raise FileNotFoundError(f"{path} has no tokenizer: expected one of {', '.join(names)}")
        return cls(_transformers_tokenizer(path), config)

    @classmethod
    def from_backend(cls, backend: str, config: ModelConfig, path: Path) -> Tokenizer:
        """The tokenizer whose backend JSON `from_dir` gave for checkpoint directory
        `path` (kept by `jaxattn.checkpoints.tokenizer_cache`): transformers is not
        imported until `hf` is asked for."""
        return cls(None, config, backend=backend, load_hf=lambda: _transformers_tokenizer(path))

    @property
    def hf(self):
        """The checkpoint's transformers tokenizer (special tokens, `save`), read on first use."""
        with self._lock:
            if self._hf is None:
                self._hf = self._load_hf()
            return self._hf

    def largest_id(self) -> int:
        """The largest id the backend can give (added tokens included); -1 if none."""
        return max(self._backend.get_vocab(with_added_tokens=True).values(), default=-1)

    def tokens_of(self, ids: Sequence[int]) -> tuple[str, ...]:
        """The word pieces of token ids, as `encode` gives them; an id the tokenizer has
        no piece for (a row of a padded embedding: Pythia's 50,304 for 50,277 tokens,
        which a generation may pick) is `unknown_id`'s "<id N>" (the backend's None
        broke the views, the CLI's token line and `Capture.save`)."""
        return tuple(self._piece(int(i)) for i in ids)

    def _piece(self, token_id: int) -> str:
        piece = self._backend.id_to_token(token_id)
        return unknown_id(token_id) if piece is None else piece

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens left out (the backend's decoder)."""
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=True)

    def save(self, path: Path) -> None:
        self.hf.save_pretrained(str(path))

    def encode(self, texts: Sequence[Text], too_long: str = "error") -> list[TokenizedText | None]:
        """Tokenise texts (already checked by `check_texts`).

        Args:
          texts: the texts.
          too_long: a text over the model's maximum length: "error" raises
            TooLongError, "truncate" cuts it (longest sentence first for a pair;
            `truncated` is set), "skip" gives None in its place.

        Raises:
          TooLongError: a text over the limit under too_long="error".
          InputError: a sentence pair given to a decoder (causal) model (named by index).
        """
        if too_long not in TOO_LONG:
            raise UsageError(f"unknown too_long {too_long!r}: valid are {', '.join(TOO_LONG)}")
        if self.config.causal:
            _refuse_pairs(texts, self.config.family)
        if not texts:
            return []
        texts = list(texts)
        limit, truncating = self.config.max_length, self._truncating
        pieces, read = self._pieces.pieces, 0
        # The per-text work below is the host's share of a large capture (issues 26, 32):
        # the word pieces are the table's shared strings, not a new string per token.
        # Not encode_batch_fast (tokenizers >= 0.21, no offsets, ~14 % less Rust time):
        # in 0.23 its Encodings give empty strings for some pieces (an unknown word's,
        # Unigram's, BPE's) and a pair's sentence B type id 0 where no post-processor
        # sets them.
        out: list[TokenizedText | None] = []
        append = out.append
        encoded = self._backend.encode_batch(texts, add_special_tokens=True)
        for i, (text, e) in enumerate(zip(texts, encoded, strict=True)):
            ids = e.ids
            read += len(ids)
            truncated = len(ids) > limit
            if truncated:
                if too_long == "error":
                    raise TooLongError(i, len(ids), limit)
                if too_long == "skip":
                    append(None)
                    continue
                e = truncating.encode(*_pair(text), add_special_tokens=True)
                ids = e.ids
            b = None
            if isinstance(text, tuple):
                # An empty sentence B has no token of its own: it starts at the
                # final separator, where its first token would have been.
                sequence = e.sequence_ids
                b = sequence.index(1) if 1 in sequence else len(ids) - 1
            append(
                TokenizedText(
                    ids=tuple(ids),
                    type_ids=tuple(e.type_ids),
                    tokens=pieces.tokens(ids) or tuple(e.tokens),
                    sentence_b_start=b,
                    text=text,
                    truncated=truncated,
                )
            )
        self._pieces.count(read)
        return out


def _refuse_pairs(texts: Sequence[Text], family: str) -> None:
    """Raise InputError naming the first (a, b) pair: a decoder reads one text at a time."""
    for i, text in enumerate(texts):
        if isinstance(text, tuple):
            error = InputError(
                None,
                f"text {i} is a sentence pair, but {family} is a decoder (causal) model, "
                "which reads single texts only: give the two sentences as one text",
            )
            error.index = i
            raise error


def _pair(text: Text) -> tuple:
    return text if isinstance(text, tuple) else (text,)


def _transformers_tokenizer(path: Path):
    """AutoTokenizer's reading of a checkpoint directory's tokenizer (a fast one).

    Raises:
      CheckpointError: it has no fast (tokenizers) backend.
    """
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if not hasattr(hf, "backend_tokenizer"):
        raise CheckpointError(f"{path}: jaxattn needs a fast (tokenizers) tokenizer")
    return hf
