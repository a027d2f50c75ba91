"""A loaded capture's fields checked against each other: its tensors' shapes against its
tokens, layers, heads, key/value heads and query/key positions.

A capture read from a file (`jaxattn.capture.npz`) or rebuilt from a server's chunks
(`jaxattn.wire.receive`) came from outside: its shapes are checked here, once, so a
mismatch is refused with the tensor, the shape expected and the shape found, not met
as an IndexError later in an analysis or a view. The expected shape of each quantity
is `jaxattn.quantities.shape` of its axes (`QUANTITIES`), sized by the capture's
fields (`token_sizes`: a map's T and S are its selected positions); the head and model
dims K and D, which no field names, must agree between the tensors that hold them, as
must the key/value heads G of a file from before `kv_heads` (which does not say them).
A name that is no quantity (a newer jaxattn's) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jaxattn.quantities import QUANTITIES, shape, token_sizes

# The axes no capture field sizes: the tensors holding one agree on it.
_FREE = "KD"
_UNNAMED_G = _FREE + "G"  # and G, in a file that predates kv_heads


def layout_problem(
    *,
    tokens: int,
    layers: int,
    heads: int,
    kv_heads: Sequence[int] | None = (),
    query_positions: Sequence[int] | None = None,
    key_positions: Sequence[int] | None = None,
    shapes: Mapping[str, Sequence[int]],
) -> str | None:
    """What is wrong with a capture's layout, in words, or None where nothing is.

    Args:
      tokens: T, its number of tokens.
      layers, heads: how many layers and heads it names.
      kv_heads: the key/value head of each query head (grouped-query), or (): G is H;
        None: not said (a file from before the field), G any size keys and values share.
      query_positions, key_positions: the maps' selected rows and keys, or None.
      shapes: tensor name -> its shape.
    """
    if kv_heads and len(kv_heads) != heads:
        return f"kv_heads names {len(kv_heads)} key/value heads for {heads} heads (one for each)"
    for field, positions in (
        ("query_positions", query_positions),
        ("key_positions", key_positions),
    ):
        if positions is None:
            continue
        positions = list(positions)
        if not positions or positions != sorted(set(positions)) or positions[0] < 0:
            return f"{field} {positions[:8]} are not ascending token positions"
        if positions[-1] >= tokens:
            return f"{field} {positions[:8]} name a position past its {tokens} tokens"
    free_axes = _FREE if kv_heads is not None else _UNNAMED_G
    sizes = {"L": layers, "H": heads}
    if kv_heads is not None:
        sizes["G"] = len(set(kv_heads)) if kv_heads else heads
    rows = None if query_positions is None else len(query_positions)
    keys = None if key_positions is None else len(key_positions)
    free: dict[str, tuple[int, str]] = {}  # K, D -> (size, the tensor that gave it)
    for name, found in shapes.items():
        q = QUANTITIES.get(name)
        if q is None:
            continue
        found = tuple(int(d) for d in found)
        if len(found) == len(q.axes):
            for letter in free_axes:
                if (i := q.axis(letter)) is not None:
                    free.setdefault(letter, (found[i], name))
        known = {**sizes, **token_sizes(name, tokens, rows, keys)}
        known.update({letter: size for letter, (size, _) in free.items()})
        unknown = {letter: 0 for letter in free_axes if letter not in known}
        expected = shape(name, {**known, **unknown})
        if found != expected:
            return _mismatch(name, found, expected, unknown, free, query_positions, key_positions)
    return None


def _mismatch(name, found, expected, unknown, free, query_positions, key_positions) -> str:
    """The words of one tensor's wrong shape: found, expected, and what sized each axis."""
    q = QUANTITIES[name]
    shown = [a if a in unknown else str(d) for a, d in zip(q.axes, expected, strict=True)]
    why = []
    if q.extra_layer:
        why.append(f"L = layers + {q.extra_layer}")
    if q.axis("G") is not None and "G" not in free:
        why.append("G = its key/value heads")
    if query_positions is not None and "T" in q.axes and "S" in q.axes:
        why.append("T = query_positions")
    if key_positions is not None and "S" in q.axes:
        why.append("S = key_positions")
    for letter, (_, source) in free.items():
        if letter in q.axes and source != name:
            why.append(f"{letter} as {source}'s")
    because = f"; {', '.join(why)}" if why else ""
    return (
        f"tensor {name!r} has shape {list(found)}, expected [{', '.join(shown)}] "
        f"([{', '.join(q.axes)}]{because})"
    )
