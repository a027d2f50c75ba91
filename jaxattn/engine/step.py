"""The jitted step: one padded batch in, every captured quantity out, on the device.

    step = CaptureStep(config, params["encoder"], devices)
    out = step(spec, *step.place(*host.pack(batch, tokenized, config, spec)), gates)

`jit(vmap(Encoder.apply))` specialised on the static `CaptureSpec`, then the
output dtype (`jaxattn.engine.quantize`), data parallel over a 1-D device mesh:
the batch sharded, the weights replicated. Where the outputs land is the host
memory policy (`HOST_MEMORY`): "pinned" has the program write them to pinned
host memory, "device" leaves them in device memory for `host.start_copies`,
"staged" has the program write them to device memory and then moves them to
pinned host memory with a transfer of its own, which the next batch's program
need not wait for. "auto" picks "staged" on GPUs, "pinned" on TPUs (unmeasured
there) and "device" on the CPU, where device memory already is host memory and
either way numpy views it without a copy. Measured on an H200 (BENCHMARKS.md,
2026-11-26): "pinned" runs the copy after the compute, not beside it; "staged"
hides part of it, identical outputs bit for bit, at tf32 1.24x pinned's rate
for attention, 1.30x for a full capture, 1.09x for uint8 attention. `compile` builds a
shape's program ahead of time without running it (`Engine.warmup`); the step keeps
it for that shape's first call, and on disk for the next process (`program_cache`:
a new process loads it without tracing the model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxattn.config import ModelConfig
from jaxattn.engine import blockwise, layer_groups, map_positions, program_cache
from jaxattn.engine import layer_loop as layer_loops
from jaxattn.engine.model import Encoder
from jaxattn.engine.oom import out_of_memory
from jaxattn.engine.params import flatten
from jaxattn.engine.quantize import quantize
from jaxattn.errors import UsageError
from jaxattn.quantities import MAPS
from jaxattn.spec import CaptureSpec

HOST_MEMORY = ("auto", "pinned", "device", "staged")


def resolve_host_memory(policy: str, devices: Sequence[jax.Device]) -> str:
    """ "pinned", "device" or "staged" for `policy` on `devices`.

    Raises:
      UsageError: an unknown policy, or "pinned"/"staged" on devices without
        pinned host memory.
    """
    if policy not in HOST_MEMORY:
        raise UsageError(f"unknown host_memory {policy!r}: valid are {', '.join(HOST_MEMORY)}")
    kinds = {m.kind for d in devices for m in d.addressable_memories()}
    if policy == "auto":
        if "pinned_host" not in kinds or any(d.platform == "cpu" for d in devices):
            return "device"
        return "staged" if all(d.platform == "gpu" for d in devices) else "pinned"
    if policy in ("pinned", "staged") and "pinned_host" not in kinds:
        have = ", ".join(sorted(kinds))
        raise UsageError(
            f"host_memory={policy!r}: {devices[0].platform} devices here offer "
            f"no pinned host memory (they have {have})"
        )
    return policy


def matmul_platform(device) -> str:
    """The platform `Matmul` picks native dot algorithms for: "gpu" only from Ampere
    (compute capability 8.0) on, where TF32 and BF16 tensor cores exist; older GPUs
    emulate the fast precisions like the CPU."""
    if device.platform == "gpu":
        capability = getattr(device, "compute_capability", None)
        try:
            if capability is not None and float(capability) < 8.0:
                return "gpu-pre-ampere"
        except ValueError:
            pass
    return device.platform


def _refuse_blockwise(what, ablated: bool):
    """Raise the error of a request that attention="blockwise" cannot run blockwise."""
    maps = sorted(set(what) - blockwise.SERVES)
    if maps:
        served = ", ".join(sorted(blockwise.SERVES))
        why = (
            f"{', '.join(maps)} need{'s' if len(maps) == 1 else ''} the dense path "
            f"(the blockwise path serves {served})"
        )
    elif ablated:
        why = "heads ablated run the dense path"
    else:  # pragma: no cover - choose_block allows everything else
        why = "the request needs the dense path"
    raise UsageError(
        f"attention='blockwise' cannot run this capture: {why}; "
        "load with attention='auto' (blockwise where possible) or 'dense'"
        " (--attention auto or dense on the command line)"
    )


def _quantized(spec: CaptureSpec, out: dict, mask, positions) -> dict:
    """A program's outputs {name: [B, L, ...]} in the spec's dtype (`quantize`), the
    maps with their selected rows and keys' masks (`map_positions`)."""
    maps = map_positions.masks(mask, positions)
    return {
        name: quantize(name, x, mask, spec.dtype, maps if name in MAPS else None)
        for name, x in out.items()
    }


class CaptureStep:
    """The compiled capture program of one model on a set of devices.

    Args:
      config: the model config.
      params: the encoder's params tree (placed on the devices, replicated).
      devices: the devices of the data-parallel mesh.
      host_memory: where outputs land: "auto", "pinned", "device" or "staged" (module
        docstring).
      layer_loop: "auto", "unrolled", "scan" or None (`jaxattn.engine.layer_loop`); with
        "scan" the placed `params` hold the weight sets stacked.
      attention: "auto", "dense" or "blockwise" (`jaxattn.engine.blockwise.choose_block`):
        whether a request of quantities the blockwise path serves (`blockwise.SERVES`)
        runs its attention blockwise. "auto": such a request from
        `blockwise.AUTO_MIN_LENGTH` padded tokens on (with a map;
        `blockwise.AUTO_MIN_LENGTH_STATS` without); "blockwise": every request, and
        one that cannot run blockwise (a quantity it does not serve, heads ablated)
        is refused by `block_for`, naming why; a model with relative positions
        (DeBERTa) refuses "blockwise" here.
      block: the blockwise path's block size, queries and keys (the engine's
        attention_block; None: `blockwise.BLOCK`; `blockwise.check_block`).
    """

    def __init__(
        self,
        config: ModelConfig,
        params: dict,
        devices: Sequence[jax.Device],
        host_memory: str = "auto",
        layer_loop: str | None = None,
        attention: str = "auto",
        block: int | None = None,
    ):
        self.devices = tuple(devices)
        self.host_memory = resolve_host_memory(host_memory, self.devices)
        self.layer_loop = layer_loops.resolve_layer_loop(layer_loop, self.devices)
        mesh = Mesh(np.asarray(self.devices), ("data",))
        replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        pinned = NamedSharding(mesh, P("data"), memory_kind="pinned_host")
        out = pinned if self.host_memory == "pinned" else batch
        self._staged = pinned if self.host_memory == "staged" else None
        self._batch_sharding = batch
        self._config = config
        if self.layer_loop == "scan":  # each stacked weight placed (and its host copy let go)
            params = layer_loops.stack_layers(params, config, put=_placer(replicated))
        self.params = jax.device_put(params, replicated)
        platform = matmul_platform(self.devices[0])
        self.attention = attention
        self.block = blockwise.BLOCK if block is None else blockwise.check_block(block)
        blockwise.choose_block(attention, config, (), 0, block=self.block)  # check the names
        if attention == "blockwise" and config.relative is not None:
            raise UsageError(
                f"attention='blockwise': {config.family} models (relative positions) have no "
                "blockwise path; valid for them are auto, dense"
            )
        self._model = Encoder(
            config,
            platform=platform,
            layer_loop=self.layer_loop,
            attention=attention,
            block=self.block,
        )
        self._templates: dict = {}  # scanned: a group signature -> its program's span
        self._programs: set[tuple] = set()  # (spec, [B, T], heads ablated[, span]) compiled
        # The programs kept on disk across processes (`program_cache`; None: off).
        self.program_cache = (
            None
            if self.host_memory == "pinned"
            else program_cache.ProgramCache.for_step(
                repr(
                    (
                        config,
                        program_cache.signature(self.params),
                        self.host_memory,
                        self.layer_loop,
                        attention,
                        self.block,
                        platform,
                    )
                ),
                self.devices,
            )
        )
        # The whole model's program: the CaptureSpec static; params, ids, type_ids, mask,
        # classes, positions, gates.
        self._whole = program_cache.Program(
            "capture",
            self._forward,
            self.program_cache,
            static=1,
            in_shardings=(replicated, batch, batch, batch, batch, batch, replicated),
            out_shardings=out,
            fixed=(1,),
        )
        self._jit = self._whole.jit  # traced as it is (memory analyses: benchmarks)
        # One layer group's program (`jaxattn.engine.layer_groups`): the spec and the
        # group's span static; the hidden state entering it (None for the first) stays
        # on the devices, sharded with the batch, and comes out beside its outputs; the
        # layer shift (scanned: alike groups share a program) an argument.
        self._group = program_cache.Program(
            "group",
            self._forward_group,
            self.program_cache,
            static=2,
            in_shardings=(
                (replicated, batch, batch, batch, batch, batch, batch, replicated, replicated)
            ),
            out_shardings=(out, batch),
            fixed=(2,),
        )
        self._group_jit = self._group.jit  # traced as it is (`lower_group`)

    def _forward(self, spec: CaptureSpec, params, ids, type_ids, mask, classes, positions, gates):
        # gates: None, or (keep [L, H], uniform [L, H]) shared by the batch (ablation).
        # positions: the maps' selected rows and keys, {field: [B, n]} (`map_positions`).
        def one(i, t, m, c, p):  # one example: [T] -> {name: [L, ...]}
            return self._model.apply({"params": params}, i, t, m, spec, gates, c, p)

        out = jax.vmap(one)(ids, type_ids, mask, classes, positions)  # {name: [B, L, ...]}
        return _quantized(spec, out, mask, positions)

    def _forward_group(
        self,
        spec: CaptureSpec,
        span,
        params,
        x,
        ids,
        type_ids,
        mask,
        classes,
        positions,
        gates,
        shift,
    ):
        # As _forward, for layers span[0]..span[1]-1 only (moved up by `shift` where
        # given): x [B, T, D] the hidden state entering them (None at layer 0); returns
        # (outputs, the hidden state after them).
        def one(i, t, m, c, p, h):
            model = self._model.apply
            kw = dict(span=span, x=h, shift=shift)
            return model({"params": params}, i, t, m, spec, gates, c, p, **kw)

        out, x = jax.vmap(one)(ids, type_ids, mask, classes, positions, x)
        return _quantized(spec, out, mask, positions), x

    def group(
        self, spec: CaptureSpec, span, x, ids, type_ids, mask, classes, positions=None, gates=None
    ) -> tuple[dict, jax.Array | None]:
        """Dispatch one layer group of one batch (asynchronously): (its outputs
        {name: {"data": [B, n, ...], ...}} for the group's captured layers, as `__call__`
        returns every layer's, the hidden state [B, T, D] after the group's last
        layer, on the devices, or None where that layer's output is skipped).

        span: (start, stop), the layers the group runs (`layer_groups.Group.span`);
        x: the hidden state the group before it returned (None for the group at layer 0).
        """
        span, shift = self._group_program(spec, span)
        self._programs.add((spec, ids.shape, gates is not None, span))
        positions = positions or {}
        args = (spec, span, self.params, x, ids, type_ids, mask, classes, positions, gates, shift)
        out, x = self._group(*args)
        if self._staged is not None:  # a transfer of its own, dispatched asynchronously
            out = jax.device_put(out, self._staged)
        return out, x

    def lower_group(self, spec: CaptureSpec, span, x, ids, type_ids, mask, classes, positions=None):
        """The lowered (not compiled) program of one layer group for these placed arrays
        (its `.compile().memory_analysis()` says what the group's program holds)."""
        span, shift = self._group_program(spec, span)
        args = (spec, span, self.params, x, ids, type_ids, mask, classes, positions or {})
        return self._group_jit.trace(*args, None, shift).lower()

    def _group_program(self, spec: CaptureSpec, span) -> tuple:
        """(the span whose program runs group `span`, its traced layer shift or None):
        scanned, alike groups share a program (`layer_groups.template`)."""
        if self.layer_loop != "scan":
            return span, None
        span, shift = layer_groups.template(self._config, spec, span, self._templates)
        return span, None if shift is None else np.int32(shift)

    def block_for(self, spec: CaptureSpec, length: int, ablated: bool = False) -> int:
        """The block size a batch of `spec` at padded `length` runs its attention in, 0 for
        the dense path (`blockwise.choose_block`, as the program decides).

        Raises:
          UsageError: attention="blockwise" and the request needs the dense path: the
            quantities it cannot serve are named (or the heads ablated).
        """
        block = blockwise.choose_block(
            self.attention, self._config, spec.what, length, ablated, self.block
        )
        if block or self.attention != "blockwise":
            return block
        return _refuse_blockwise(spec.what, ablated)

    def place(self, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
        """Host batch arrays [B, T] onto the mesh, sharded along B.

        Placed here, on this engine's (process-local) mesh: in a multi-process
        job jit refuses host arrays with a batch sharding, and one placement
        rule for every process count keeps warmup and run on the same programs
        (the jit cache keys on argument types).
        """
        # One call for all of them: each device_put call has a fixed cost (its
        # dispatch, the sharding's checks) larger than a small batch's own copy.
        return tuple(jax.device_put(arrays, self._batch_sharding))

    def __call__(
        self, spec: CaptureSpec, ids, type_ids, mask, classes, positions=None, gates=None
    ) -> dict:
        """Dispatch one batch (asynchronously): {name: {"data": [B, ...], ...}} on the devices.

        The inputs are `host.pack`'s, placed by `place`: ids, type_ids, mask and
        the token-class bits, each [B, T], and the maps' selected positions
        ({field: [B, n]}, `jaxattn.engine.map_positions`; None or {}: none).
        """
        self._programs.add((spec, ids.shape, gates is not None))
        args = (self.params, ids, type_ids, mask, classes, positions or {}, gates)
        out = self._whole(spec, *args)
        if self._staged is not None:  # a transfer of its own, dispatched asynchronously
            out = jax.device_put(out, self._staged)
        return out

    def compile(self, spec: CaptureSpec, ids, type_ids, mask, classes, positions=None) -> None:
        """Compile the program of these placed arrays (no heads ablated) without running
        it ahead of time (`program_cache.Program.compiled`: loaded from the program cache
        where it holds it), so the first call of that shape runs at once."""
        args = (self.params, ids, type_ids, mask, classes, positions or {}, None)
        self._whole.compiled(spec, *args)
        self._programs.add((spec, ids.shape, False))

    def compile_groups(
        self, spec: CaptureSpec, spans, ids, type_ids, mask, classes, positions=None
    ):
        """Compile the programs of one example's layer groups `spans` (`group`'s, in order,
        no heads ablated) for these placed arrays without running them, as `compile` the
        one program: each group's entering hidden state is the one before's, as traced."""
        x = None
        for span in spans:
            program, shift = self._group_program(spec, span)
            args = (spec, program, self.params, x, ids, type_ids, mask, classes, positions or {})
            compiled = self._group.compiled(*args, None, shift)
            self._programs.add((spec, ids.shape, False, program))
            x = compiled.out_info[1]  # the hidden state's shape, dtype and sharding

    def canonical_params(self) -> dict:
        """The params as the checkpoint names them (one entry per weight set), on the host
        (all of them at once: `canonical_tensors` one at a time)."""
        params = jax.tree.map(to_host, self.params)
        if self.layer_loop == "scan":
            return layer_loops.unstack_layers(params, self._config)
        return params

    def canonical_tensors(self) -> tuple[list[str], Callable[[str], np.ndarray]]:
        """The params of `canonical_params`, one tensor at a time: their flat names
        ("layer_0/attention/query/kernel", `params.flatten`'s) and a function copying the
        one named to the host, a stacked weight's one layer alone: a caller that lets each
        go before asking for the next (`params.fingerprint_tensors`) holds one tensor on
        the host, not the tree (4.1 GB for Llama-3.2-1B in float32). Asked for in name
        order, each layer's weight set is sliced out of the stack once (on one device)."""
        tensors = _OneAtATime(self.params, layer_loops.stacked_names(self._config))
        return tensors.names, tensors

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape, heads ablated or not) programs have been compiled so far."""
        return len(self._programs)


def to_host(array) -> np.ndarray:
    """A placed array on the host: a copy from a GPU's or TPU's memory, a view of a CPU's."""
    return np.asarray(array)


def host_views(array) -> bool:
    """Whether `to_host(array)` is a view, no copy: a single-device array in a CPU's
    memory."""
    return all(d.platform == "cpu" for d in array.devices())


def _placer(sharding):
    """A host array onto `sharding`, the copy done (its host array free to go) on return."""
    return lambda a: jax.device_put(a, sharding).block_until_ready()


class _OneAtATime:
    """`CaptureStep.canonical_tensors`'s function: called with a name, that tensor on the
    host."""

    def __init__(self, params: dict, stacked_names: list[str]):
        self._rest = flatten({k: v for k, v in params.items() if k != "layers"})
        # One device's copy of each stacked weight [W, ...] (replicated: any one holds it).
        self._stacked = {
            k: a.addressable_data(0) for k, a in flatten(params.get("layers", {})).items()
        }
        self._index = {n: i for i, n in enumerate(stacked_names)} if self._stacked else {}
        self._layer: tuple[int, dict] | None = None  # the weight set sliced out last
        # The stacked weights on the host, sliced there: views of a CPU's memory (no copy,
        # no program), or a copy where the device had no room to slice a layer out.
        self._on_host: dict | None = None
        if self._stacked and all(host_views(a) for a in self._stacked.values()):
            self._on_host = {k: to_host(a) for k, a in self._stacked.items()}
        self.names = [*self._rest, *(f"{n}/{k}" for n in self._index for k in self._stacked)]

    def __call__(self, name: str) -> np.ndarray:
        if name in self._rest:
            return to_host(self._rest[name])
        head, _, key = name.partition("/")
        i = self._index[head]
        if self._layer is None or self._layer[0] != i:
            self._layer = None  # the last one let go before the next is sliced
            self._layer = (i, self._weight_set(i))
        return to_host(self._layer[1][key])

    def _weight_set(self, i: int) -> dict:
        """Weight set `i`, sliced out on the device; where it has no room for one (a
        capture beside this thread holds its memory), the stacked weights copied to the
        host whole, once (the copy the fingerprint made before it went one at a time),
        and sliced there: no fingerprint, and so no capture, fails for want of room. On
        a CPU, sliced from views of the stacked weights (`host_views`)."""
        if self._on_host is None:
            try:
                return jax.block_until_ready(_layer_weights(self._stacked, np.int32(i)))
            except jax.errors.JaxRuntimeError as e:
                if not out_of_memory(e):
                    raise
                self._on_host = {k: to_host(a) for k, a in self._stacked.items()}
        return {k: a[i] for k, a in self._on_host.items()}


@jax.jit
def _layer_weights(stacked: dict, i) -> dict:
    """Weight set `i` of the stacked weights {name: [W, ...]}: one program for every
    layer (`i` traced), compiled once per model."""
    return {k: jax.lax.dynamic_index_in_dim(a, i, keepdims=False) for k, a in stacked.items()}
