"""Manifest parts: per shard, which examples it holds and where their data is.

One JSON document per shard, kept as the attributes of a zarr group
(``manifest/s000012/zarr.json``, attribute ``jaxattn_manifest``) so any zarr
client reads it. It is written once, after all of the shard's array data is
durable: its presence is the shard's commit.
Examples are listed in input order; the store's example i is the i-th entry of
the parts taken in shard order.
"""

from __future__ import annotations

import dataclasses
import math

from jaxattn.continuations import STOPS
from jaxattn.errors import CaptureFileError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Entry:
    """One stored example.

    Attributes:
      record: 0-based index of the example among the input's records.
      line: 1-based line of the input where the example starts.
      id: the input's id ("id" in JSONL, ``# sent_id`` in CoNLL-U), else str(record).
      tokens: the word pieces, special tokens included.
      sentence_b_start: first token of sentence B, or None.
      truncated: the text was cut to the model's maximum length.
      text: the input text, or its (A, B) pair; None in stores written before the manifest
        kept it.
      generated_start: index of the first token a decoder generated after the text
        (``jaxattn dump --generate N``): tokens[:generated_start] are the prompt's; None
        for a text captured as it is, and in stores written before the field.
      stop: why that continuation ended, one of `jaxattn.continuations.STOPS`; None
        for a text captured as it is, and in stores written before the field.
      data: quantity -> (offset, shape): the example's elements are
        ``array[offset : offset + prod(shape)]`` of the shard's array, C order.
      quantization: quantity -> (scale, offset) of uint8 tensors.
    """

    record: int
    line: int
    id: str
    tokens: tuple[str, ...]
    sentence_b_start: int | None
    truncated: bool = False
    text: str | tuple[str, str] | None = None
    generated_start: int | None = None
    stop: str | None = None
    data: dict[str, tuple[int, tuple[int, ...]]]
    quantization: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @property
    def length(self) -> int:
        """T, the example's length in tokens."""
        return len(self.tokens)

    def to_json(self) -> dict:
        out = {
            "record": self.record,
            "line": self.line,
            "id": self.id,
            "tokens": list(self.tokens),
            "length": self.length,
            "sentence_b_start": self.sentence_b_start,
            "truncated": self.truncated,
            "text": list(self.text) if isinstance(self.text, tuple) else self.text,
            "data": {q: {"offset": o, "shape": list(s)} for q, (o, s) in self.data.items()},
        }
        for key in ("generated_start", "stop"):  # a plain example's entry is as before
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.quantization:
            out["quantization"] = {q: list(v) for q, v in self.quantization.items()}
        return out

    @classmethod
    def from_json(cls, doc: dict) -> Entry:
        """The entry `to_json` wrote.

        Raises:
          CaptureFileError, KeyError, TypeError, ValueError: a field missing, or not of
            the kind `to_json` writes (naming it): a damaged manifest part.
        """
        entry = cls(
            record=doc["record"],
            line=doc["line"],
            id=doc["id"],
            tokens=tuple(doc["tokens"]),
            sentence_b_start=doc["sentence_b_start"],
            truncated=doc.get("truncated", False),
            text=tuple(doc["text"]) if isinstance(doc.get("text"), list) else doc.get("text"),
            generated_start=doc.get("generated_start"),
            stop=doc.get("stop"),
            data={q: (d["offset"], tuple(d["shape"])) for q, d in doc["data"].items()},
            quantization={q: (v[0], v[1]) for q, v in doc.get("quantization", {}).items()},
        )
        entry.check()
        return entry

    def check(self) -> None:
        """Raise CaptureFileError naming the first field not of the kind `to_json` writes."""
        b, text, g, stop = self.sentence_b_start, self.text, self.generated_start, self.stop
        wrong = (
            ("record", not _count(self.record)),
            ("line", not _count(self.line)),
            ("id", not isinstance(self.id, str)),
            ("tokens", not all(isinstance(t, str) for t in self.tokens)),
            ("sentence_b_start", b is not None and not (_count(b) and b <= self.length)),
            ("truncated", not isinstance(self.truncated, bool)),
            ("generated_start", g is not None and not (_count(g) and g <= self.length)),
            ("stop", stop is not None and not (isinstance(stop, str) and stop in STOPS)),
            ("stop", stop is not None and g is None),  # a stop reason needs a continuation
            ("text", not (text is None or isinstance(text, str) or _pair(text))),
            ("data", not all(map(_place, self.data.values()))),
            ("quantization", not all(map(_numbers, self.quantization.values()))),
        )
        for name, bad in wrong:
            if bad:
                raise CaptureFileError(
                    f"example {self.record!r}: {name} is not what jaxattn writes"
                )


def _count(value) -> bool:
    """A whole number >= 0 (a JSON integer; not true/false)."""
    return type(value) is int and value >= 0


def _place(data) -> bool:
    """An (offset, shape) of whole numbers >= 0 within an int64 array."""
    offset, shape = data
    return _count(offset) and all(map(_count, shape)) and offset + math.prod(shape) < 2**63


def _pair(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(t, str) for t in value)


def _numbers(value) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Skipped:
    """An input record that is not in the store.

    Attributes:
      record: 0-based record index.
      line: 1-based input line.
      reason: "error" (unreadable, or too long under --too-long error) or "too_long".
      message: what was wrong.
    """

    record: int
    line: int
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardPart:
    """The manifest part of one finished shard.

    Attributes:
      shard: the shard index.
      records: [start, stop) of the input records the shard covers.
      examples: the stored examples, in input order.
      skipped: the records left out, in input order.
      sizes: quantity -> elements of the shard's array.
      stats: informational (process, seconds, bytes).
    """

    shard: int
    records: tuple[int, int]
    examples: tuple[Entry, ...]
    skipped: tuple[Skipped, ...] = ()
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    stats: dict = dataclasses.field(default_factory=dict)

    @property
    def truncated(self) -> int:
        return sum(e.truncated for e in self.examples)

    def count(self, reason: str) -> int:
        """Skipped records with this reason ("error" or "too_long")."""
        return sum(s.reason == reason for s in self.skipped)

    def to_json(self) -> dict:
        return {
            "shard": self.shard,
            "records": list(self.records),
            "examples": [e.to_json() for e in self.examples],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
            "sizes": self.sizes,
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, doc: dict) -> ShardPart:
        """The part `to_json` wrote.

        Raises:
          CaptureFileError, KeyError, TypeError, ValueError, IndexError, AttributeError:
            a damaged part.
        """
        part = cls(
            shard=doc["shard"],
            records=tuple(doc["records"]),
            examples=tuple(Entry.from_json(e) for e in doc["examples"]),
            skipped=tuple(Skipped(**s) for s in doc.get("skipped", ())),
            sizes=doc.get("sizes", {}),
            stats=doc.get("stats", {}),
        )
        if not (_count(part.shard) and len(part.records) == 2 and all(map(_count, part.records))):
            raise CaptureFileError(
                f"shard {part.shard!r}, records {part.records!r}: not what jaxattn writes"
            )
        return part
