"""How the encoder runs its layer stack: unrolled, or scanned over stacked weights.

"unrolled": every layer is its own code in the program. XLA optimises across
layers and the step runs fastest on the CPU, but the program holds L copies of
the layer, and its compile time grows with L.

"scan": the weight sets are stacked along a leading axis (one "layers" entry in
the params tree in place of "layer_0", "layer_1", ...: `stack_layers`), and each
run of alike layers is one `lax.scan` whose body is the layer, compiled once.
On GPUs, where one (bucket, batch) shape of BERT-base compiled for 11-28 s
unrolled, this is the compile-time lever the big JAX codebases pull (MaxText,
T5X, Flax's examples all scan their layers).

`jaxattn.load(..., layer_loop=...)` picks one; None (the default) takes
$JAXATTN_LAYER_LOOP, else "auto": "scan" on GPUs and TPUs, "unrolled" on the
CPU, where compiles take about a second and the unrolled step runs as fast or a
few percent faster (BENCHMARKS.md, "The layer stack as a scan": scanned, a
BERT-base shape compiles a quarter faster, the step runs 0-5% slower). Both
give the same numbers within float32 rounding (XLA fuses differently).

Layers are alike (`layer_runs`) when they capture the same quantities, both
produce their output (only the last layer run may skip it), and have the same
code: ModernBERT's layer 0 has no attention LayerNorm. A rotary model's
global and local layers differ only in data (RoPE base, local window), which a
scan takes per layer; unrolled, each layer has its own code anyway. ALBERT's
layers index their shared weight set. So the program holds one layer body per
run, not per layer: BERT-base or ModernBERT-base capturing every layer is one
run (two for ModernBERT: its layer 0), plus the last layer apart where its
output is not needed; a sparse selection such as layers 0, 2, 4 splits into a
run per layer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import jax
import numpy as np
from jax import lax

from jaxattn.config import ModelConfig
from jaxattn.engine.aligned import aligned_empty
from jaxattn.errors import UsageError
from jaxattn.spec import CaptureSpec

LAYER_LOOPS = ("auto", "unrolled", "scan")
ENV = "JAXATTN_LAYER_LOOP"  # the default where `layer_loop` is None (serve, dump, ...)


def resolve_layer_loop(policy: str | None, devices: Sequence[jax.Device]) -> str:
    """ "unrolled" or "scan" for `policy` on `devices` (None: $JAXATTN_LAYER_LOOP, else auto).

    Raises:
      UsageError: an unknown policy, naming the valid ones (and the variable it came from).
    """
    where = "layer_loop"
    if policy is None:
        policy, where = os.environ.get(ENV) or "auto", f"${ENV}"
    if policy not in LAYER_LOOPS:
        raise UsageError(f"unknown {where} {policy!r}: valid are {', '.join(LAYER_LOOPS)}")
    if policy == "auto":
        return "unrolled" if any(d.platform == "cpu" for d in devices) else "scan"
    return policy


@dataclass(frozen=True)
class Run:
    """Layers start..stop-1, alike: one scan (or one call when it is a single layer)."""

    start: int
    stop: int
    captured: bool  # in spec.layers
    output: bool  # the layer's output is needed (every layer but maybe the last run)

    def __len__(self) -> int:
        return self.stop - self.start


def layer_runs(
    config: ModelConfig, spec: CaptureSpec, scan: bool = False, outputs: bool = False
) -> list[Run]:
    """Layers 0..spec.last_layer as maximal runs of alike layers (module docstring).

    scan: the runs of a scan, where a rotary layer's kind (global or local) is
    data (`global_layers`), so global and local layers share a run.
    outputs: every layer's output is needed, the last's too (decoding: the next
    token's logits read it).
    """
    captured = set(spec.layers)

    def key(layer: int) -> tuple:
        output = outputs or layer < spec.last_layer or "hidden_states" in spec.what
        kind = None if scan else _is_global(config, layer)
        return layer in captured, output, (config.bare_first_layer and layer == 0, kind)

    runs: list[Run] = []
    for layer in range(spec.last_layer + 1):
        k = key(layer)
        if runs and key(runs[-1].start) == k:
            runs[-1] = Run(runs[-1].start, layer + 1, k[0], k[1])
        else:
            runs.append(Run(layer, layer + 1, k[0], k[1]))
    return runs


def clip(runs: Sequence[Run], start: int, stop: int) -> list[Run]:
    """The parts of `runs` inside layers start..stop-1 (one layer group's), each still
    alike: a run cut at a group's edge keeps its kind and whether it outputs."""
    return [
        Run(max(r.start, start), min(r.stop, stop), r.captured, r.output)
        for r in runs
        if r.start < stop and r.stop > start
    ]


def global_layers(config: ModelConfig, run: Run):
    """[n] bool, whether each layer of the run attends globally (rotary models), or
    None for models without rotary positions: a scan body's `is_global`."""
    if config.rotary is None:
        return None
    return np.array([_is_global(config, layer) for layer in range(run.start, run.stop)])


def _is_global(config: ModelConfig, layer: int) -> bool | None:
    if config.rotary is None:
        return None
    return config.rotary.is_global(layer)


def first_stacked(config: ModelConfig) -> int:
    """The first weight set in the stack: 1 for pre-LN models whose layer 0 has no
    attention LayerNorm (ModernBERT: other params than the rest: it stays "layer_0"),
    else 0."""
    return 1 if config.bare_first_layer else 0


def stacked_names(config: ModelConfig) -> list[str]:
    """The params entries that `stack_layers` stacks, in order: "layer_0", "layer_1", ..."""
    return [f"layer_{i}" for i in range(first_stacked(config), config.weight_layers)]


def stack_layers(params: dict, config: ModelConfig, put=None) -> dict:
    """The encoder params with weight sets `first_stacked`.. stacked into "layers" [W, ...].

    A pre-LN model of one layer has nothing to stack: its params stay as they are
    (its one layer runs as layer 0, unstacked). `put`: applied to each stacked weight as
    it is made, before the next (the engine's: onto the devices, so that the host holds
    one stacked weight beside the params at a time, not a second copy of the stack).
    Each stack is C-contiguous and 64-byte aligned (`aligned.aligned_empty`): placed on
    the CPU it is not copied again.
    """
    names = stacked_names(config)
    if not names:
        return dict(params)
    rest = {k: v for k, v in params.items() if k not in names}
    put = put or (lambda a: a)

    def stack(*ws):
        ws = [np.asarray(w) for w in ws]
        out = aligned_empty((len(ws), *ws[0].shape), np.result_type(*ws))
        return put(np.stack(ws, out=out))

    stacked = jax.tree.map(stack, *(params[n] for n in names))
    return rest | {"layers": stacked}


def unstack_layers(params: dict, config: ModelConfig) -> dict:
    """`stack_layers` undone: "layer_0", "layer_1", ... again (numpy views)."""
    if "layers" not in params:  # nothing was stacked
        return dict(params)
    rest = {k: v for k, v in params.items() if k != "layers"}
    stacked = jax.tree.map(np.asarray, params["layers"])
    return rest | {
        n: jax.tree.map(lambda w, i=i: w[i], stacked) for i, n in enumerate(stacked_names(config))
    }


def layer_gate(gates, i: int):
    """Layer i's (keep [H], uniform [H]) of a run's gates (keep [n, H], uniform [n, H]),
    or None when nothing is ablated."""
    return None if gates is None else (gates[0][i], gates[1][i])


def call_layer(layer, x, gate, hidden: bool, kwargs: dict):
    """One layer: `layer(x, gate=gate, **kwargs)` -> (its output, its captures), with
    the output also captured as "hidden_states" when `hidden`."""
    y, cap = layer(x, gate=gate, **kwargs)
    return y, cap | ({"hidden_states": y} if hidden else {})


def run_caches(cache, run: Run):
    """The key/value caches of a run's layers: `cache` (k, v [L, H_kv, S, K]) cut to
    layers run.start..run.stop-1."""
    return cache.replace(k=cache.k[run.start : run.stop], v=cache.v[run.start : run.stop])


def layer_cache(caches, i: int):
    """Layer i's cache of a run's caches (`run_caches`): k, v [H_kv, S, K]."""
    return caches.replace(k=caches.k[i], v=caches.v[i])


def run_scanned(
    layer,
    stacked: dict,
    weight_sets,
    x,
    gates,
    hidden: bool,
    is_global=None,
    caches=None,
    **kwargs,
):
    """Run one run of alike layers as a scan over their weight sets.

    Args:
      layer: the (unbound) layer module of the run's code.
      stacked: the "layers" params, [W, ...] each.
      weight_sets: [n] int, the weight set of each layer of the run.
      x: the run's input [T, D].
      gates: None, or (keep [n, H], uniform [n, H]): the run's ablation gates.
      hidden: also return each layer's output as "hidden_states" [n, T, D].
      is_global: None, or [n] bool: each rotary layer's kind (`global_layers`).
      caches: None, or the run's key/value caches (`run_caches`), each layer its own.
      **kwargs: the rest of the layer's call (mask, want, output, classes, rel_table).

    Returns:
      (the last layer's output, {name: [n, ...]} the layers' captures).
    """

    def body(x, xs):
        w, gate, kind, kv = xs
        params = jax.tree.map(lambda a: a[w], stacked)
        call = partial(layer.apply, {"params": params}, is_global=kind)
        args = kwargs
        if kv is not None:  # this layer's cache, its position shared by the run
            args = dict(kwargs, cache=caches.replace(k=kv[0], v=kv[1]))
        return call_layer(call, x, gate, hidden, args)

    kv = None if caches is None else (caches.k, caches.v)
    return lax.scan(body, x, (weight_sets, gates, is_global, kv))
