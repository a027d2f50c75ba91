"""The capture spec: what to compute, validated once, static under jit.

No jax (numpy only, through the dtype table), so the service and the client
validate requests with the same rules and messages as the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import UsageError
from jaxattn.quantities import MAPS, QUANTITIES, token_sizes
from jaxattn.selection import Selection, positions_of, resolve_indices, resolve_positions

DEFAULT_WHAT = ("attention",)
# Compute precisions (`jaxattn.engine.precision`); "highest" is exact float32.
PRECISIONS = ("highest", "tf32", "bf16")


def check_precision(precision: str) -> str:
    """`precision` if it is one of PRECISIONS (UsageError naming the valid ones otherwise)."""
    if precision not in PRECISIONS:
        raise UsageError(
            f"unknown precision {precision!r}: valid precisions are {', '.join(PRECISIONS)}"
        )
    return precision


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureSpec:
    """What one capture computes. Hashable: the engine's jit is specialised on it.

    Attributes:
      what: quantity names, in the canonical order of `QUANTITIES`.
      layers: captured layer indices, ascending, 0-indexed.
      heads: captured head indices, ascending, 0-indexed.
      kv_heads: a grouped-query model's key/value head of each captured query head
        (query head h reads h // (H / H_kv)), one per entry of `heads`; the G axis
        of `keys` and `values` holds each once, ascending (`kv_axis`). () without
        grouped-query attention (G = H: the G axis is `heads`).
      dtype: output dtype, a key of `jaxattn.dtypes.OUTPUT_DTYPES`.
      precision: compute precision of every contraction: "highest" (exact
        float32), "tf32" or "bf16" (`jaxattn.engine.precision`).
      query_positions: the query rows the maps (`jaxattn.quantities.MAPS`) keep, as
        asked: token positions, negative ones from each example's own end
        (`positions_of`); None: every row. Each example's are `resolve_positions`.
      key_positions: the key positions (columns) the maps keep, likewise.
    """

    what: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str = "float32"
    precision: str = "highest"
    kv_heads: tuple[int, ...] = ()
    query_positions: tuple[int, ...] | None = None
    key_positions: tuple[int, ...] | None = None

    @property
    def kv_axis(self) -> tuple[int, ...]:
        """The key/value heads on the G axis of `keys` and `values`: each of `kv_heads`
        once, ascending; () without grouped-query attention (the G axis is `heads`)."""
        return tuple(sorted(set(self.kv_heads)))

    @property
    def last_layer(self) -> int:
        """Deepest layer the forward must run (layers past it are never computed)."""
        return self.layers[-1]

    def token_sizes(self, name: str, length: int) -> dict[str, int]:
        """T and S of quantity `name` for an example of `length` tokens: a map's are the
        selected rows and keys (`jaxattn.quantities.token_sizes`)."""
        rows, keys = self.query_positions, self.key_positions
        return token_sizes(
            name, length, None if rows is None else len(rows), None if keys is None else len(keys)
        )

    def positions_of_example(self, length: int, where: str = "the text") -> dict[str, tuple]:
        """{"query_positions": rows, "key_positions": keys} of an example of `length`
        tokens, each `resolve_positions` (absolute, ascending), or None where not selected.

        Raises:
          UsageError: a position outside the example (naming the field, the position,
            `where` and its length) or two that name one token.
        """
        return {
            field: None if value is None else resolve_positions(value, length, field, where)
            for field, value in (
                ("query_positions", self.query_positions),
                ("key_positions", self.key_positions),
            )
        }

    def check_examples(self, lengths, where: str = "text {}") -> None:
        """`positions_of_example` of each (input index, length), before anything runs;
        `where` names the text by its index.

        Raises:
          UsageError: as `positions_of_example`, with `.index` the text's input index
            (`capture_iter` names it by its place in the whole input).
        """
        fine: set[int] = set()  # lengths checked: a call's texts share a few
        for i, length in lengths:
            if length in fine:
                continue
            try:
                self.positions_of_example(length, where.format(i))
            except UsageError as e:
                e.index = i
                raise
            fine.add(length)


def check_quantity(name: str) -> None:
    """UsageError unless `name` is a quantity jaxattn knows (any model's)."""
    if not isinstance(name, str) or name not in QUANTITIES:
        raise UsageError(f"unknown quantity {name!r}: valid quantities are {', '.join(QUANTITIES)}")


def check_what(what: str | Sequence[str] | None, dtype: str) -> list[str]:
    """The quantity names of `what` (a single name is accepted; None: the default),
    each one jaxattn knows, in an output dtype that can hold them. What a given
    model computes is `make_spec`'s check (the client leaves it to the server).

    Raises:
      UsageError: an unknown name or dtype, no name, or a quantity that has no
        uint8 encoding (`Quantity.uint8`) as uint8.
    """
    if what is None:
        what = DEFAULT_WHAT
    if not isinstance(what, (str, Iterable)):
        raise UsageError(
            f"what must be a quantity name or a list of them, got {type(what).__name__}"
        )
    names = [what] if isinstance(what, str) else list(what)
    for name in names:
        check_quantity(name)
    if not names:
        raise UsageError(f"no quantity asked for: name at least one of {', '.join(QUANTITIES)}")
    if dtype not in OUTPUT_DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}: valid dtypes are {', '.join(OUTPUT_DTYPES)}")
    mixed = [n for n in names if not QUANTITIES[n].uint8]
    if dtype == "uint8" and mixed:
        raise UsageError(
            f"{', '.join(dict.fromkeys(mixed))} cannot be uint8: one affine range would serve "
            "numbers of different scales (fractions and entropies; norms before and after "
            "a LayerNorm); use float16 or bfloat16 (a few numbers per head or token)"
        )
    return names


def make_spec(
    *,
    what: str | Sequence[str] | None,
    layers: Selection,
    heads: Selection,
    dtype: str,
    num_layers: int,
    num_heads: int,
    precision: str = "highest",
    available: Sequence[str] | None = None,
    refused: Mapping[str, str] | None = None,
    kv_heads: int | None = None,
    query_positions: Selection = None,
    key_positions: Selection = None,
    max_length: int | None = None,
) -> CaptureSpec:
    """Validate a capture request and return its spec.

    Args:
      what: quantity names (a single name is accepted); None means ("attention",).
      layers: layers (`Selection`: indices, negative ones, slices), None for all.
      heads: heads likewise.
      dtype: output dtype name.
      precision: compute precision name.
      num_layers: the model's layer count.
      num_heads: the model's heads per layer.
      available: the quantities the model computes (`ModelConfig.quantities`);
        None: all of `QUANTITIES`.
      refused: quantity -> why this model refuses it, the rest of a sentence that
        begins with the name (`ModelConfig.refused_quantities`: a decoder's head
        statistics; its scores as uint8).
      kv_heads: the model's key/value heads (grouped-query attention when fewer than
        num_heads: then `keys` and `values` hold the key/value heads the selected
        query heads read, `CaptureSpec.kv_heads`); None: num_heads.
      query_positions: the query rows the maps keep (`positions_of`: token positions,
        negative ones from each example's end, fixed-width slices), None for all;
        each example's are checked against its length when it is captured
        (`CaptureSpec.positions_of_example`).
      key_positions: the key positions the maps keep, likewise.
      max_length: the model's longest input: no more positions than this (None: no bound).

    Raises:
      UsageError: naming the bad field and the valid choices; positions for a
        request that asks for no map (`jaxattn.quantities.MAPS`).
    """
    names = check_what(what, dtype)
    rows = positions_of(query_positions, "query_positions", max_length)
    keys = positions_of(key_positions, "key_positions", max_length)
    check_maps_asked(names, rows is not None or keys is not None)
    for name in names:
        if refused and name in refused:
            raise UsageError(f"quantity {name!r} {refused[name]}")
        if available is not None and name not in available:
            raise UsageError(
                f"quantity {name!r} is not computed by this model: it has "
                f"{', '.join(available)} (the scores_* terms are DeBERTa's)"
            )
    picked = resolve_indices(heads, num_heads, "heads")
    grouped = kv_heads is not None and kv_heads != num_heads
    return CaptureSpec(
        what=tuple(q for q in QUANTITIES if q in set(names)),
        layers=resolve_indices(layers, num_layers, "layers"),
        heads=picked,
        dtype=dtype,
        precision=check_precision(precision),
        kv_heads=kv_heads_read(picked, num_heads, kv_heads) if grouped else (),
        query_positions=rows,
        key_positions=keys,
    )


def spec_for(
    config,
    what=None,
    layers=None,
    heads=None,
    dtype: str = "float32",
    precision: str = "highest",
    *,
    query_positions: Selection = None,
    key_positions: Selection = None,
) -> CaptureSpec:
    """`make_spec` of a request against the model of `config` (a `ModelConfig`: its
    layer and head counts, quantities, key/value heads and longest input), as
    `Engine.make_spec` checks it; needs no weights (a dump checks a finished store
    against the config it recorded)."""
    return make_spec(
        what=what,
        layers=layers,
        heads=heads,
        dtype=dtype,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        precision=precision,
        available=config.quantities(),
        refused=config.refused_quantities(dtype),
        kv_heads=config.kv_heads,
        query_positions=query_positions,
        key_positions=key_positions,
        max_length=config.max_length,
    )


def check_maps_asked(what: Sequence[str], positions: bool) -> None:
    """UsageError where query or key positions are given (`positions`) for a capture of
    `what` that asks for no map (`jaxattn.quantities.MAPS`): they would select nothing."""
    if positions and not set(what) & set(MAPS):
        raise UsageError(
            f"query_positions and key_positions select rows and keys of the maps "
            f"({', '.join(MAPS)}); this capture asks for none ({', '.join(what)}): "
            "leave them out, or capture a map too"
        )


def kv_heads_read(heads: Sequence[int], num_heads: int, kv_heads: int) -> tuple[int, ...]:
    """The key/value head each query head of `heads` reads under grouped-query attention,
    in the order of `heads`: query head h reads key/value head h // (num_heads / kv_heads).

    Raises:
      UsageError: kv_heads does not divide num_heads (naming both).
    """
    if kv_heads <= 0 or num_heads % kv_heads:
        raise UsageError(
            f"num_key_value_heads {kv_heads} does not divide the model's {num_heads} heads"
        )
    group = num_heads // kv_heads
    return tuple(h // group for h in heads)


def check_kv_heads(
    kv_heads: Sequence[int], limit: int, heads: Sequence[int], where: str
) -> tuple[int, ...]:
    """`kv_heads` as a tuple, if it names one key/value head of a model with `limit` of
    them for each of the query heads `heads` (or is empty: no grouped-query attention).

    Args:
      kv_heads: the key/value head of each query head (a store's, a wire header's).
      limit: the model's num_key_value_heads.
      heads: the query heads they belong to.
      where: what named them, for the message ("the store at PATH").

    Raises:
      UsageError: an index past the limit (or negative), named with the limit; a
        count other than the query heads'.
    """
    out = tuple(int(i) for i in kv_heads)
    for i in out:
        if not 0 <= i < limit:
            raise UsageError(
                f"{where} names key/value head {i}, past the model's num_key_value_heads "
                f"{limit}: valid key/value heads are 0..{limit - 1}"
            )
    if out and len(out) != len(heads):
        raise UsageError(
            f"{where} names {len(out)} key/value heads for {len(heads)} query heads (one for each)"
        )
    return out
