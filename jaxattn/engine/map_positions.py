"""The maps' selected query rows and key positions, gathered on the device.

A capture may keep only some query rows and key positions of the maps
(`jaxattn.quantities.MAPS`: attention, scores, alpha_fx_norm, ...;
`CaptureSpec.query_positions` / `key_positions`). Negative positions count from
each example's own end, so the positions are data, not part of the program:
`host.pack` resolves them per example into [B, R] and [B, S'] int32 arrays
(`arrays`), the step vmaps them with the batch, and each layer gathers its maps'
rows and keys (`select`) before they are stacked, so the program's outputs,
and the copy to the host, hold [.., R, S'], not [.., T, S]. The other quantities
are computed and returned as without a selection.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from jaxattn.quantities import MAPS, QUANTITIES
from jaxattn.spec import CaptureSpec

# The positions' entries: the spec's fields, the map axis each selects along.
FIELDS = {"query_positions": "T", "key_positions": "S"}


def arrays(spec: CaptureSpec, lengths: Sequence[int | None]) -> dict[str, np.ndarray]:
    """{field: [B, n] int32} of the selected fields of `spec`, one row per example of
    `lengths` (None: a dummy row, whose positions are 0, its one real key): each
    example's `CaptureSpec.positions_of_example`, ascending. {} without a selection."""
    out = {}
    for field in FIELDS:
        asked = getattr(spec, field)
        if asked is None:
            continue
        rows = np.zeros((len(lengths), len(asked)), np.int32)
        for r, n in enumerate(lengths):
            if n is not None:
                rows[r] = spec.positions_of_example(n)[field]
        out[field] = rows
    return out


def select(cap: dict, positions: dict | None) -> dict:
    """One layer's (or a stack of layers') captures with each map's rows and keys cut to
    `positions` ({field: [n] int}, one example's; None or {}: all): [.., T, S] ->
    [.., R, S']. Other quantities pass as they are."""
    if not positions:
        return cap
    out = dict(cap)
    for name in MAPS:
        if name not in out:
            continue
        q = QUANTITIES[name]
        t = out[name]
        for field, letter in FIELDS.items():
            if field in positions:
                # from the end: the same axis in one layer's map and in the stacked one
                t = jnp.take(t, positions[field], axis=q.axis(letter) - len(q.axes))
        out[name] = t
    return out


def masks(mask, positions: dict | None) -> dict:
    """The real-position masks of the maps' token axes T and S ({letter: [B, n]}) after
    `select`: `mask` [B, T] at the selected positions, or `mask` itself where none."""
    out = {"T": mask, "S": mask}
    for field, letter in FIELDS.items():
        if positions and field in positions:
            out[letter] = jnp.take_along_axis(mask, positions[field], axis=1)
    return out
