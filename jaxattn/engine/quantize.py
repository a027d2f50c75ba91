"""The output dtype, applied on the device before the copy to the host.

Follows the table in `jaxattn.dtypes`. uint8 of a non-probability tensor is
affine per (example, tensor) with min/max taken over real positions only, so
padding never widens the range.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.quantities import QUANTITIES, Quantity


def _valid(q: Quantity, shape, masks: dict):
    """Bool mask of real positions for a [B, *q.axes] tensor; masks: {"T": [B, n], "S": ...}."""
    valid = jnp.ones(shape, bool)
    rank = len(q.axes)
    for axis in q.token_axes:
        i = axis + 1  # after the batch axis
        mask = masks[q.axes[axis]]
        m = mask.reshape((mask.shape[0],) + (1,) * (i - 1) + (-1,) + (1,) * (rank - i))
        valid = valid & m
    return valid


def quantize(name: str, x, mask, dtype: str, masks: dict | None = None) -> dict:
    """Cast one batched float32 tensor [B, ...] of quantity `name` to the output dtype.

    mask: [B, T], the real positions; masks: those of the token axes by letter where
    they differ ({"T": [B, R], "S": [B, S']}: a map's selected positions,
    `jaxattn.engine.map_positions.masks`), None: `mask` for both.

    Returns:
      {"data": the tensor in `dtype`} plus, for affine uint8, {"scale": [B], "offset": [B]}.
    """
    if dtype == "float32":
        return {"data": x}
    if dtype != "uint8":  # float16, bfloat16: a cast to the table's type
        return {"data": x.astype(OUTPUT_DTYPES[dtype])}
    q = QUANTITIES[name]
    if q.probability:
        return {"data": jnp.round(jnp.clip(x, 0.0, 1.0) * 255.0).astype(jnp.uint8)}
    # NaN (entropy_cls of an example without [CLS]) has no uint8 code: it is left
    # out of the range and stored as 0, i.e. decodes to the minimum.
    valid = _valid(q, x.shape, masks or {"T": mask, "S": mask}) & ~jnp.isnan(x)
    reduce_axes = tuple(range(1, x.ndim))
    lo = jnp.min(jnp.where(valid, x, jnp.inf), axis=reduce_axes)
    hi = jnp.max(jnp.where(valid, x, -jnp.inf), axis=reduce_axes)
    scale = jnp.where(hi > lo, (hi - lo) / 255.0, 1.0)
    expand = (slice(None),) + (None,) * (x.ndim - 1)
    data = jnp.where(jnp.isnan(x), 0.0, jnp.round((x - lo[expand]) / scale[expand]))
    return {"data": jnp.clip(data, 0, 255).astype(jnp.uint8), "scale": scale, "offset": lo}
