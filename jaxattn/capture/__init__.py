"""`Capture`: what the engine, the client and the store return for one example.

A leaf of the package (numpy only; it imports nothing but the contract): the
client builds the same objects without jax, and a capture saves to and loads
from one portable .npz file (`jaxattn.capture.npz`: the format). Views of a
capture (HTML, SVG, the BertViz adapter) live in `jaxattn.views`.

A quantity the capture does not hold, read as an attribute, raises AttributeError
saying what it holds and how to capture the quantity too (``what=...`` in Python,
``--what NAMES`` on the command line); a name that is no quantity nor attribute
gets the nearest one. Python's probes (``hasattr``, ``getattr`` with a default,
copy, pickle) see plain AttributeErrors.

Modules: `npz` (the .npz file), `part` (`CapturePart`: one layer group's share of
an example), `shapes` (a loaded capture's tensors checked against its tokens,
layers and heads), `bulk` (large host copies on several threads).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
from collections.abc import Iterable, Mapping
from typing import overload

import numpy as np

from jaxattn.capture import npz
from jaxattn.capture.npz import FILE_FORMAT, READABLE_FORMATS
from jaxattn.dtypes import dequantize
from jaxattn.errors import UsageError
from jaxattn.quantities import QUANTITIES
from jaxattn.selection import is_int

__all__ = ["FILE_FORMAT", "READABLE_FORMATS", "Capture", "capture_list", "frozen", "one_capture"]


def frozen(mapping: Mapping | None = None) -> Mapping:
    """A read-only view of a provenance mapping (shared by many captures)."""
    return types.MappingProxyType(dict(mapping or {}))


class _Quantity:
    """A capturable quantity as a typed attribute of `Capture`: its decoded array.

    Reading one that was not captured raises AttributeError naming what was.
    """

    def __set_name__(self, owner, name: str) -> None:
        self.name = name
        q = QUANTITIES[name]
        self.__doc__ = f"[{', '.join(q.axes)}] {q.doc}"

    @overload
    def __get__(self, cap: None, owner=None) -> _Quantity: ...
    @overload
    def __get__(self, cap: Capture, owner=None) -> np.ndarray: ...
    def __get__(self, cap, owner=None):
        if cap is None:
            return self
        return cap.array(self.name)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Capture:
    """The captured tensors of one example, trimmed to its real length T.

    Every captured quantity is an attribute of the same name (``cap.attention``,
    ``cap.alpha_fx_norm``, ...; declared below): a numpy array with the axes of
    `jaxattn.quantities.QUANTITIES`. float32/float16/bfloat16 captures give the
    arrays as stored; uint8 captures give them dequantised to float32 (the raw
    bytes stay available through `encoded`).

    Attributes:
      tokens: the word pieces, special tokens included ([CLS] ... [SEP]).
      sentence_b_start: index of the first token of sentence B, or None for a
        single sentence.
      layers: the captured layer indices (0-indexed).
      heads: the captured head indices (0-indexed).
      kv_heads: a grouped-query model's key/value head of each captured query
        head, one per entry of `heads` (query head h reads h // (H / H_kv),
        `ModelInfo.num_key_value_heads` = H_kv); the G axis of `keys` and `values`
        holds each once, ascending (`key_value_heads`). () without grouped-query
        attention, where the G axis is `heads` (and in captures of a jaxattn that
        predates the field).
      dtype: the output dtype (a key of `jaxattn.dtypes.OUTPUT_DTYPES`).
      tensors: name -> array in the output dtype (uint8 stays uint8).
      quantization: name -> (scale, offset) for uint8 tensors.
      precision: the compute precision that produced it ("highest": exact
        float32; "tf32", "bf16": docs/reference/dtypes.md).
      text: the input it came from, a string or an (a, b) pair; None when
        unknown (a file of format 1).
      truncated: the text was cut to the model's maximum length.
      provenance: where it came from, read-only: "model" (name), "weights"
        (a fingerprint of the weights, `jaxattn.Engine.weights_fingerprint`),
        "family", "config" (the model config), "revision" (the Hub commit the
        weights came from; "" for a local directory), "jaxattn" (the version
        that captured it), "source" ("engine", "server HOST:PORT" or "store
        PATH"). Empty when unknown.
      query_positions: the token positions (0-based, ascending) of the query rows
        the maps (`jaxattn.quantities.MAPS`: attention, scores, alpha_fx_norm, ...)
        hold, their T axis: the map's row r is token query_positions[r]; None:
        every row (T = `length`). The other quantities hold every position.
      key_positions: the token positions of the keys on the maps' S axis, likewise.
      generated_start: index of the first token a decoder generated after the prompt
        (``capture(..., generate=N)``): tokens[:generated_start] are the prompt's,
        the rest the continuation's; None for a capture of a text alone.
      stop: why that continuation ended, one of `jaxattn.continuations.STOPS`
        ("eos", "max_new_tokens", "limit"; `Generation.stop`); None for a capture of
        a text alone, and where its source predates the field (a server, file or
        store of an older jaxattn).
    """

    tokens: tuple[str, ...]
    sentence_b_start: int | None
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str
    tensors: dict[str, np.ndarray]
    quantization: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    precision: str = "highest"
    text: str | tuple[str, str] | None = None
    truncated: bool = False
    provenance: Mapping = dataclasses.field(default_factory=frozen)
    kv_heads: tuple[int, ...] = ()
    query_positions: tuple[int, ...] | None = None
    key_positions: tuple[int, ...] | None = None
    generated_start: int | None = None
    stop: str | None = None

    # The quantities, one typed attribute each (order and meaning: QUANTITIES).
    attention = _Quantity()
    scores = _Quantity()
    scores_c2c = _Quantity()
    scores_c2p = _Quantity()
    scores_p2c = _Quantity()
    queries = _Quantity()
    keys = _Quantity()
    values = _Quantity()
    fx_norm = _Quantity()
    alpha_fx_norm = _Quantity()
    sum_alpha_fx_norm = _Quantity()
    attn_res_norm = _Quantity()
    attn_res_ln_norm = _Quantity()
    mixing_ratio = _Quantity()
    mixing_norm = _Quantity()
    preserving_norm = _Quantity()
    head_stats = _Quantity()
    norm_head_stats = _Quantity()
    decoder_head_stats = _Quantity()
    decoder_norm_head_stats = _Quantity()
    row_head_stats = _Quantity()
    norm_row_head_stats = _Quantity()
    decoder_row_head_stats = _Quantity()
    decoder_norm_row_head_stats = _Quantity()
    hidden_states = _Quantity()

    @property
    def what(self) -> tuple[str, ...]:
        """The captured quantity names."""
        return tuple(self.tensors)

    @property
    def length(self) -> int:
        """T, the example's real length in tokens."""
        return len(self.tokens)

    @property
    def full_maps(self) -> bool:
        """Whether the maps hold every query row and key (no `query_positions` or
        `key_positions` selection)."""
        return self.query_positions is None and self.key_positions is None

    def check_full_maps(self, needed_by: str) -> None:
        """UsageError where the maps hold only selected rows or keys and `needed_by` (what
        reads them: "the head view") needs the whole [T, S] map."""
        if self.full_maps:
            return
        held = ", ".join(
            f"{field} {_positions_text(getattr(self, field))}"
            for field in ("query_positions", "key_positions")
            if getattr(self, field) is not None
        )
        raise UsageError(
            f"{needed_by} needs whole [T, S] maps; this capture holds {held} of "
            f"{self.length} tokens: capture without query/key positions for it"
        )

    def encoded(self, name: str) -> tuple[np.ndarray, float | None, float | None]:
        """The raw array of `name` in the output dtype, with its uint8 (scale, offset) or Nones."""
        self._check(name)
        scale, offset = self.quantization.get(name, (None, None))
        return self.tensors[name], scale, offset

    def array(self, name: str) -> np.ndarray:
        """The decoded array of quantity `name` (same as the attribute)."""
        return dequantize(*self.encoded(name))

    @property
    def key_value_heads(self) -> tuple[int, ...]:
        """The heads on the G axis of `keys` and `values`, ascending: each of `kv_heads`
        once, or `heads` without grouped-query attention."""
        return tuple(sorted(set(self.kv_heads))) if self.kv_heads else self.heads

    def select(self, layers=None, heads=None) -> Capture:
        """This capture restricted to some of its layers and heads (those slices copied).

        Args:
          layers: a layer number as in ``self.layers``, or a list of them in the
            order wanted; None keeps all.
          heads: head numbers as in ``self.heads``, likewise.

        A grouped-query capture's `keys` and `values` keep the key/value heads the
        kept query heads read (`kv_heads`).

        Raises:
          UsageError: a layer or head this capture does not hold (named), one named
            twice, none, what is no integer (a string, a slice, a float), or heads of
            a grouped-query capture that does not say which key/value head each reads.
        """
        picked = {}
        for key, want, have in (("L", layers, self.layers), ("H", heads, self.heads)):
            what = "layers" if key == "L" else "heads"
            want = tuple(have) if want is None else _numbers(want, what)
            missing = [i for i in want if i not in have]
            if missing:
                raise UsageError(f"{what} {missing} were not captured (have {list(have)})")
            picked[key] = [list(have).index(i) for i in want]
        kv_heads = tuple(self.kv_heads[i] for i in picked["H"]) if self.kv_heads else ()
        # A grouped-query capture's G axis: the key/value heads the kept query heads read.
        picked["G"] = [self.key_value_heads.index(g) for g in sorted(set(kv_heads))]
        tensors = {}
        for name, array in self.tensors.items():
            q = QUANTITIES[name]
            g = q.axis("G")
            unnamed = g is not None and not self.kv_heads and array.shape[g] != len(self.heads)
            if unnamed and heads is not None:  # a capture of a jaxattn before kv_heads
                raise UsageError(
                    f"{name} of this grouped-query capture holds {array.shape[g]} key/value "
                    f"heads, not the {len(self.heads)} query heads a head selection names, "
                    "and does not say which: select heads of a capture without keys and values"
                )
            grouped = g is not None and bool(self.kv_heads)
            for key, axis in (("L", q.layer_axis), ("G" if grouped else "H", q.head_axis)):
                if axis is not None and not (key == "H" and unnamed):
                    extra = list(range(q.extra_layer)) if key == "L" else []
                    index = extra + [i + len(extra) for i in picked[key]]
                    array = array[(slice(None),) * axis + (index,)]
            tensors[name] = array
        layers_ = tuple(self.layers[i] for i in picked["L"])
        heads_ = tuple(self.heads[i] for i in picked["H"])
        return dataclasses.replace(
            self, layers=layers_, heads=heads_, kv_heads=kv_heads, tensors=tensors
        )

    def save(self, path: str | os.PathLike, *, compress: bool = False) -> None:
        """Write this capture to one portable .npz file (any name; no suffix is added;
        the format: `jaxattn.capture.npz`).

        Args:
          path: the file to write (overwritten).
          compress: deflate the arrays (smaller, slower; attention maps shrink little).
        """
        npz.write(self, path, compress=compress)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Capture:
        """Read a capture written by `save` (any format in READABLE_FORMATS).

        Raises:
          CaptureFileError: the file is not a jaxattn capture, is damaged, or is of
            a format this jaxattn does not read (the message says what it found).
          FileNotFoundError: no such file; IsADirectoryError: a directory.
        """
        fields = npz.read(path)
        return cls(**{**fields, "provenance": frozen(fields["provenance"])})

    def __getstate__(self) -> dict:  # pickle, copy: the read-only provenance as a dict
        return {**self.__dict__, "provenance": dict(self.provenance)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, provenance=frozen(state["provenance"]))

    def __getattr__(self, name: str):
        # Reached only where the normal lookup failed: a quantity's attribute that was not
        # captured (its descriptor raised), or a name that is no attribute at all.
        if name.startswith("_"):  # Python's probes (copy, pickle, numpy): its plain answer
            raise AttributeError(f"'Capture' object has no attribute {name!r}", name=name, obj=self)
        if name not in QUANTITIES:
            near = difflib.get_close_matches(name, [*QUANTITIES, *_ATTRIBUTES], 1)
            quantity = "the quantity " if near and near[0] in QUANTITIES else ""
            hint = f": did you mean {quantity}{near[0]!r}?" if near else ""
            raise _missing(f"'Capture' object has no attribute {name!r}{hint}", self)
        self._check(name)
        return self.array(name)  # captured: its descriptor failed otherwise, and says why

    def _check(self, name: str) -> None:
        held = tuple(self.__dict__.get("tensors", ()))  # never this method again, half-built
        if name in held:
            return
        if name in QUANTITIES:
            want = (*held, name)
            raise _missing(
                f"{name!r} was not captured; this capture holds {', '.join(held) or 'nothing'}: "
                f"capture it too with what={want!r} in Python, or --what {','.join(want)} on "
                "the command line",
                self,
            )
        near = difflib.get_close_matches(name, QUANTITIES, 1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise _missing(
            f"Capture has no quantity {name!r}: {hint}quantities are {', '.join(QUANTITIES)}", self
        )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in self.tensors.items())
        positions = "".join(
            f"{field}={_positions_text(getattr(self, field))}, "
            for field in ("query_positions", "key_positions")
            if getattr(self, field) is not None
        )
        return (
            f"Capture(T={self.length}, layers={list(self.layers)}, heads={list(self.heads)}, "
            + (f"kv_heads={list(self.kv_heads)}, " if self.kv_heads else "")
            + positions
            + (f"generated_start={self.generated_start}, " if self.generated_start else "")
            + (f"stop={self.stop}, " if self.stop else "")
            + f"dtype={self.dtype}, precision={self.precision}, {shapes})"
        )


# What a misspelt name may have meant besides a quantity: the fields, properties, methods.
_ATTRIBUTES = tuple(
    n
    for n in dict.fromkeys([*(f.name for f in dataclasses.fields(Capture)), *dir(Capture)])
    if not n.startswith("_") and n not in QUANTITIES
)


def one_capture(value, needed_by: str) -> Capture:
    """`value` if it is a Capture; else a UsageError saying that `needed_by` ("rollout",
    "to_svg") takes one (a list of them: pick one)."""
    if isinstance(value, Capture):
        return value
    hint = (
        ": pick one, as caps[0]"
        if isinstance(value, (list, tuple))
        else " (capture_iter's progress passes None for a text it skipped)"
        if value is None
        else ""
    )
    raise UsageError(f"{needed_by} takes one Capture, got {type(value).__name__}{hint}")


def capture_list(value, needed_by: str) -> list[Capture]:
    """One Capture, or an iterable of them, as a list; else a UsageError saying what
    `needed_by` ("the view page") got, or which entry is no Capture."""
    if isinstance(value, Capture):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UsageError(
            f"{needed_by} takes a Capture or a list of them, got {type(value).__name__}"
        )
    caps = list(value)
    for i, cap in enumerate(caps):
        if not isinstance(cap, Capture):
            raise UsageError(f"{needed_by}: captures[{i}] is a {type(cap).__name__}, not a Capture")
    return caps


def _numbers(value, field: str) -> tuple[int, ...]:
    """`select`'s layer or head numbers: an integer or an iterable of integers (a
    numpy array too), each once; UsageError naming `field` otherwise."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if is_int(value):
        value = (value,)
    if isinstance(value, (str, bytes, slice)) or not isinstance(value, Iterable):
        raise UsageError(
            f"{field} must be a number as in cap.{field} or a list of them, "
            f"got {type(value).__name__} {value!r}"
        )
    out = tuple(value)
    bad = [v for v in out if not is_int(v)]
    if bad:
        raise UsageError(f"{field} must hold integers as in cap.{field}, got {bad[0]!r}")
    out = tuple(int(v) for v in out)
    if not out:
        raise UsageError(f"{field} is empty: leave it out (None) to keep every one")
    if len(set(out)) != len(out):
        raise UsageError(f"{field} names a number twice: {list(out)}")
    return out


def _positions_text(positions: tuple[int, ...]) -> str:
    """Positions as a reader takes them in: runs as ranges ("[0, 5:9]", 9 excluded)."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][1]:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    return "[" + ", ".join(f"{a}" if b == a + 1 else f"{a}:{b}" for a, b in runs) + "]"


def _missing(message: str, cap: Capture) -> AttributeError:
    """An AttributeError whose message says it all: its ``name`` is left None, so Python
    appends no "Did you mean" of its own (it would name the nearest attribute, such as
    sum_alpha_fx_norm for a missing alpha_fx_norm)."""
    return AttributeError(message, name=None, obj=cap)
