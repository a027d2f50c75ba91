"""How fast the host side can take a capture's bytes: the bound for cases (c)-(e).

`host_copy_rate` times a device-to-host copy of `nbytes` into pinned host
memory (the path the engine's outputs take on an accelerator) or, where the
devices have no separate memory (the CPU), a host memcpy of the same bytes.
`moved_bytes` is what a capture copies: every batch's padded output block.
"""

from __future__ import annotations

import time

# The copy timed is at most this large: a rate, not the corpus's whole output at once.
MAX_COPY_BYTES = 1 << 30


def host_copy_rate(nbytes: int, repeats: int = 3) -> tuple[float, str]:
    """(bytes per second, what was timed): the best of `repeats` copies of `nbytes`
    (at most 1 GiB: large enough to reach the link's rate, small enough to fit)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    device = jax.devices()[0]
    n = max(min(nbytes, MAX_COPY_BYTES) // 4, 1)
    kinds = {m.kind for m in device.addressable_memories()}
    if device.platform != "cpu" and "pinned_host" in kinds:
        x = jax.block_until_ready(jnp.ones((n,), jnp.float32))
        target = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")

        def copy():
            jax.block_until_ready(jax.device_put(x, target))

        what = f"device-to-host copy into pinned memory ({device.platform})"
    else:
        src = np.ones((n,), np.float32)
        dst = np.empty_like(src)

        def copy():
            np.copyto(dst, src)

        what = "host memcpy (no device memory on the CPU)"
    copy()  # warm: first-touch page faults, allocator pools
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        copy()
        best = min(best, time.perf_counter() - t)
    return n * 4 / best, what


def moved_bytes(engine, texts, **capture) -> int:
    """Output bytes a capture of `texts` moves to the host: padded batch blocks, not
    trimmed examples (what the copy really carries)."""
    spec = engine.make_spec(
        capture.get("what"),
        capture.get("layers"),
        capture.get("heads"),
        capture.get("dtype", "float32"),
    )
    plan = engine.plan(engine.tokenize(texts, too_long="truncate"), spec)
    return sum(b.size * engine.output_bytes(spec, b.length) for b in plan)
