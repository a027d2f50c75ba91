"""The jitted step: one padded batch in, every captured quantity out, on the device.

    step = CaptureStep(config, params["encoder"], devices)
    out = step(spec, *step.place(ids, type_ids, mask), gates)   # {name: {"data", ...}}

`jit(vmap(Encoder.apply))` specialised on the static `CaptureSpec`, then the
output dtype (`jaxattn.engine.quantize`), data parallel over a 1-D device mesh:
the batch sharded, the weights replicated.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxattn.config import ModelConfig
from jaxattn.engine.model import Encoder
from jaxattn.engine.quantize import quantize
from jaxattn.spec import CaptureSpec


class CaptureStep:
    """The compiled capture program of one model on a set of devices.

    Args:
      config: the model config.
      params: the encoder's params tree (placed on the devices, replicated).
      devices: the devices of the data-parallel mesh.
    """

    def __init__(self, config: ModelConfig, params: dict, devices: Sequence[jax.Device]):
        self.devices = tuple(devices)
        mesh = Mesh(np.asarray(self.devices), ("data",))
        replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        self._batch_sharding = batch
        self.params = jax.device_put(params, replicated)
        self._model = Encoder(config)
        self._jit = jax.jit(
            self._forward,
            static_argnums=0,  # the CaptureSpec; in_shardings cover the rest
            in_shardings=(replicated, batch, batch, batch, replicated),
            out_shardings=batch,
        )

    def _forward(self, spec: CaptureSpec, params, ids, type_ids, mask, gates):
        # gates: None, or (keep [L, H], uniform [L, H]) shared by the batch (ablation).
        def one(i, t, m):  # one example: [T] -> {name: [L, ...]}
            return self._model.apply({"params": params}, i, t, m, spec, gates)

        out = jax.vmap(one)(ids, type_ids, mask)  # {name: [B, L, ...]}
        return {name: quantize(name, x, mask, spec.dtype) for name, x in out.items()}

    def place(self, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
        """Host batch arrays [B, T] onto the mesh, sharded along B.

        Placed here, on this engine's (process-local) mesh: in a multi-process
        job jit refuses host arrays with a batch sharding, and one placement
        rule for every process count keeps warmup and run on the same programs
        (the jit cache keys on argument types).
        """
        return tuple(jax.device_put(x, self._batch_sharding) for x in arrays)

    def __call__(self, spec: CaptureSpec, ids, type_ids, mask, gates=None) -> dict:
        """Dispatch one batch (asynchronously): {name: {"data": [B, ...], ...}} on the devices."""
        return self._jit(spec, self.params, ids, type_ids, mask, gates)

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape) programs have been compiled so far."""
        return self._jit._cache_size()
