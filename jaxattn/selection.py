"""Selections: which layers, heads and token positions a request names, in the one
grammar the Python API, the CLI and the service share.

    resolve_indices("0,3,-1", 12, "layers")     # (0, 3, 11): layers and heads
    positions_of("-256:", "query_positions")    # (-256, ..., -1): each text's last 256
    resolve_positions((-2, 0), 10, "query_positions")   # (0, 8) in a 10-token text

Numpy-free: the client validates with the same rules and messages as the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jaxattn.errors import UsageError

# The most token positions a query_positions or key_positions selection may name, where
# the model's longest input (ModelInfo.max_positions, `ModelConfig.max_length`) is not
# at hand or is longer: each position names a token of every text of the request, once,
# so no request names more than its shortest text's tokens, and a map of 2**20 rows is
# 4 MiB a key per head and layer. The engine, the server and the client bound a
# selection by `position_limit`, reading an iterable only up to one past it: a
# `range(10**9)` is counted, `itertools.count()` read 2**20 + 1 deep, never listed.
MAX_POSITIONS = 1 << 20

Selection = int | slice | range | Iterable[int | slice] | str | None
"""Layers or heads: None (all), an index, a slice, or a list of indices and slices;
negative indices count from the end, as in Python. A string is the CLI grammar
(`parse_selection`)."""


def parse_selection(value: str) -> tuple[int | slice, ...]:
    """The CLI grammar of --layers/--heads: comma-separated indices and ranges.

    '0,3,-1' -> (0, 3, -1); '8:12' -> (slice(8, 12),) (12 excluded, as in Python);
    ':2, -2:' -> (slice(None, 2), slice(-2, None)); spaces anywhere are ignored.

    Raises:
      UsageError: naming the part that is neither an integer nor a range.
    """
    out: list[int | slice] = []
    for part in value.replace(" ", "").split(","):
        if not part:
            continue
        picked = _part(part)
        if picked is None:
            raise UsageError(
                f"{part!r} in {value!r} is neither an index (3, -1) nor a range (8:12, :4, -2:)"
            )
        out.append(picked)
    if not out:
        raise UsageError(f"{value!r} selects nothing: give indices (0,3,-1) or ranges (8:12)")
    return tuple(out)


def _part(part: str) -> int | slice | None:
    """One comma-separated part of `parse_selection`'s grammar; None: neither an integer
    nor a range (a step, or more than three fields)."""
    try:
        if ":" not in part:
            return int(part)
        bounds = [int(b) if b else None for b in part.split(":")]
    except ValueError:  # int() of what is no integer
        return None
    if len(bounds) > 3 or bounds[2:] and bounds[2] is not None:
        return None
    return slice(bounds[0], bounds[1])


def resolve_indices(value: Selection, count: int, field: str) -> tuple[int, ...]:
    """The sorted, 0-based indices a selection names out of `count` (None: all).

    Raises:
      UsageError: an index out of range, a duplicate, an empty selection, or a
        value that is no integer (naming the field and the valid range).
    """
    if value is None:
        return tuple(range(count))
    if isinstance(value, str):
        value = parse_selection(value)
    if getattr(value, "ndim", 0) and hasattr(value, "tolist"):  # a numpy array of indices
        value = value.tolist()
    if isinstance(value, (slice, range)) or is_int(value):
        value = (value,)
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise UsageError(f"{field} must be indices or slices, got {type(value).__name__}")
    valid = f"{field} are 0..{count - 1} (or -{count}..-1 from the end)"
    out: list[int] = []
    for v in value:
        if isinstance(v, (slice, range)):
            picked = range(count)[v] if isinstance(v, slice) else v
            if isinstance(v, range) and any(not -count <= i < count for i in v):
                raise UsageError(f"{field} {v} reaches past the model's {count}: valid {valid}")
            if not picked:
                raise UsageError(f"{field} {_show(v)} selects nothing: valid {valid}")
            out += [i % count for i in picked]
            continue
        if not is_int(v):
            raise UsageError(f"{field} must hold integers or slices, got {v!r}")
        i = int(v)
        if not -count <= i < count:
            raise UsageError(f"{field[:-1]} {i} is out of range: valid {valid}")
        out.append(i % count)
    if not out:
        raise UsageError(
            f"{field} is empty: leave it out for all, or give indices in 0..{count - 1}"
        )
    if len(set(out)) != len(out):
        raise UsageError(f"{field} names an index twice: {sorted(out)}")
    return tuple(sorted(out))


def positions_of(
    value: Selection, field: str, max_length: int | None = None
) -> tuple[int, ...] | None:
    """The token positions a `Selection` names, in its order, as the wire carries them:
    0 is each example's first token (its [CLS] or BOS), -1 its last (negative
    positions count from each example's own end); None: every position.

    A slice keeps one count of positions whatever an example's length, so that maps
    of one request have one shape: both bounds from the start ('0:64', ':64') or from
    the end ('-256:', '-8:-4'); a slice that runs from one side to the other ('10:',
    ':-1') would keep a different count of each text, and is refused.

    Raises:
      UsageError: a slice with a step or from one side to the other, an empty one, a
        non-integer, a position twice, more positions than `position_limit(max_length)`
        (the model's longest input, or MAX_POSITIONS where that is None or longer),
        naming the field; an iterable is read no further than one past that.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_selection(value)
    if getattr(value, "ndim", 0) and hasattr(value, "tolist"):  # a numpy array
        value = value.tolist()
    if isinstance(value, (slice, range)) or is_int(value):
        value = (value,)
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise UsageError(f"{field} must be positions or slices, got {type(value).__name__}")
    most, bound = position_limit(max_length)
    out: list[int] = []
    for v in value:  # one at a time: a generator without end stops one past `most`
        if isinstance(v, slice):
            v = _fixed_width(v, field)
        if isinstance(v, range):  # counted before it is listed: range(10**9) filled memory
            if len(out) + len(v) > most:
                raise _too_many(field, len(out) + len(v), bound)
            out += v
        elif is_int(v):
            out.append(int(v))
            if len(out) > most:
                raise _too_many(field, f"at least {len(out)}", bound)
        else:
            raise UsageError(f"{field} must hold integers or slices, got {v!r}")
    if not out:
        raise UsageError(f"{field} is empty: leave it out for all, or give token positions")
    seen: set[int] = set()
    for p in out:
        if p in seen:
            raise UsageError(f"{field} names position {p} twice: name each once")
        seen.add(p)
    return tuple(out)


def position_limit(max_length: int | None) -> tuple[int, str]:
    """(the most positions a selection may name, what that most is, for an error): the
    model's longest input `max_length`, or MAX_POSITIONS where it is None or longer."""
    if max_length is not None and max_length <= MAX_POSITIONS:
        return max_length, f"the model's longest input ({max_length} tokens)"
    return MAX_POSITIONS, (
        f"a request may name ({MAX_POSITIONS}, jaxattn.selection.MAX_POSITIONS: each names "
        "a token of every text)"
    )


def _too_many(field: str, count: int | str, bound: str) -> UsageError:
    return UsageError(f"{field} names {count} positions, more than {bound}")


def _fixed_width(s: slice, field: str) -> range:
    """The positions of a slice whose count is the same in every example (`positions_of`)."""
    if s.step not in (None, 1):
        raise UsageError(f"{field} {_show(s)}:{s.step} has a step: give ranges without one")
    start = 0 if s.start is None else int(s.start)
    if s.stop is None and start < 0:
        stop = 0  # "-256:": up to each example's end
    elif s.stop is not None and (start < 0) == (int(s.stop) < 0):
        stop = int(s.stop)
    else:
        raise UsageError(
            f"{field} {_show(s)} runs from each text's start to its end, a different "
            "count of positions in each: give both bounds from the start (0:64, :64) or "
            "both from the end (-256:, -8:-4)"
        )
    if stop <= start:
        raise UsageError(f"{field} {_show(s)} selects no position")
    return range(start, stop)


def bad_position(positions: Sequence[int], length: int) -> tuple[int, int | None] | None:
    """The first of `positions` that does not name one token of its own in an example of
    `length` tokens: (its index, None) where it is outside -length..length-1, (its
    index, the index of the earlier one naming its token) where two name one (0 and
    -length); None when each names one."""
    seen: dict[int, int] = {}
    for i, p in enumerate(positions):
        if not -length <= p < length:
            return i, None
        if p % length in seen:
            return i, seen[p % length]
        seen[p % length] = i
    return None


def resolve_positions(
    positions: Sequence[int], length: int, field: str, where: str = "the text"
) -> tuple[int, ...]:
    """The absolute token positions, ascending, that `positions` (`positions_of`) name in
    an example of `length` tokens.

    Raises:
      UsageError: one outside the example (naming the field, the position, `where` and
        its length), or two naming one token (0 and -length).
    """
    bad = bad_position(positions, length)
    if bad is not None:
        i, earlier = bad
        p = positions[i]
        if earlier is None:
            raise UsageError(
                f"{field} position {p} is outside {where} of {length} tokens: valid "
                f"positions there are 0..{length - 1} (or -{length}..-1 from its end)"
            )
        raise UsageError(
            f"{field} positions {positions[earlier]} and {p} both name token {p % length} "
            f"of {where} of {length} tokens: name each token once"
        )
    return tuple(sorted(p % length for p in positions))


def out_of_range(index: int, length: int, holder: str) -> str:
    """'index 7 is out of range: the store holds 5 examples (0..4, or -5..-1)': an
    example index past a sequence of `length` that `holder` names."""
    if length == 0:
        return f"index {index} is out of range: {holder} holds no examples"
    noun = "example" if length == 1 else "examples"
    return (
        f"index {index} is out of range: {holder} holds {length} {noun}"
        f" (0..{length - 1}, or -{length}..-1)"
    )


def is_int(v) -> bool:
    """Whether `v` is an integer index: an int or a numpy integer, not a bool."""
    return not isinstance(v, bool) and (isinstance(v, int) or hasattr(v, "__index__"))


def _show(s: slice | range) -> str:
    if isinstance(s, range):
        return str(s)
    return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
