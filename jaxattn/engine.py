"""The capture engine: texts in, one `Capture` per text out.

texts -> tokenizer -> bucketed batches -> jit(vmap(Encoder.apply)) specialised on
a static CaptureSpec -> on-device encoding -> async host copy overlapped with the
next batch -> per-example trimming -> Captures (in input order from `capture`,
as ready from `run`).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Iterator, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxattn import batching
from jaxattn.capture import Capture
from jaxattn.config import ModelConfig, ModelInfo
from jaxattn.device_encode import encode
from jaxattn.encodings import ENCODINGS, PROBABILITY_SCALE
from jaxattn.model import Encoder
from jaxattn.params import check_params
from jaxattn.quantities import QUANTITIES
from jaxattn.spec import CaptureSpec, make_spec
from jaxattn.tokenize import Encoding, Text, Tokenizer, check_texts

# Batches in flight: one computing while the previous one's copy lands.
_PIPELINE_DEPTH = 2


class Engine:
    """A loaded model ready to capture. Build it with `jaxattn.load`.

    Args:
      config: the model config.
      params: the params tree ({"encoder": ..., optional "pooler", "mlm_head"}).
      tokenizer: the checkpoint's tokenizer.
      buckets: candidate bucket lengths (capped at the model's maximum).
      output_budget: most output bytes one batch may return (device memory).
      token_budget: most padded tokens per batch (bounds activation memory).
      max_batch: most examples per batch and device.
      devices: the devices to run on, data-parallel over a 1-D mesh (batch
        sharded, weights replicated); default: every local device.
    """

    def __init__(
        self,
        config: ModelConfig,
        params: dict,
        tokenizer: Tokenizer,
        *,
        buckets: Sequence[int] = batching.DEFAULT_BUCKETS,
        output_budget: int = 256 << 20,
        token_budget: int = 16384,
        max_batch: int = 64,
        devices: Sequence[jax.Device] | None = None,
    ):
        check_params(config, params["encoder"])
        self.config = config
        self.tokenizer = tokenizer
        self.info = ModelInfo.of(config)
        self.extra_params = {k: v for k, v in params.items() if k != "encoder"}
        self.devices = tuple(devices) if devices else tuple(jax.local_devices())
        mesh = Mesh(np.asarray(self.devices), ("data",))
        replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        self._batch_sharding = batch
        self._params = jax.device_put(params["encoder"], replicated)
        self.buckets = batching.buckets_for(config.max_length, buckets)
        self._budgets = dict(
            output_budget=output_budget, token_budget=token_budget, max_batch=max_batch
        )
        self._model = Encoder(config)
        self._step = jax.jit(
            self._forward,
            static_argnums=0,  # the CaptureSpec; in_shardings cover the rest
            in_shardings=(replicated, batch, batch, batch, replicated),
            out_shardings=batch,
        )

    # -- the jitted step -------------------------------------------------------

    def _forward(self, spec: CaptureSpec, params, ids, type_ids, mask, gates):
        # gates: None, or (keep [L, H], uniform [L, H]) shared by the batch (ablation).
        def one(i, t, m):  # one example: [T] -> {name: [L, ...]}
            return self._model.apply({"params": params}, i, t, m, spec, gates)

        out = jax.vmap(one)(ids, type_ids, mask)  # {name: [B, L, ...]}
        return {name: encode(name, x, mask, spec.dtype) for name, x in out.items()}

    # -- public API --------------------------------------------------------------

    def make_spec(self, what=None, layers=None, heads=None, dtype: str = "float32") -> CaptureSpec:
        """Validate a request against this model (ValueError naming the field)."""
        return make_spec(
            what=what,
            layers=layers,
            heads=heads,
            dtype=dtype,
            num_layers=self.config.num_layers,
            num_heads=self.config.num_heads,
        )

    def tokenize(self, texts: Sequence[Text], truncate: bool = False) -> list[Encoding]:
        """Check and tokenise texts (ValueError naming the bad text's index)."""
        return self.tokenizer.encode(check_texts(texts), truncate=truncate)

    def capture(
        self,
        texts: Sequence[Text],
        what: str | Sequence[str] | None = ("attention",),
        layers: Iterable[int] | int | None = None,
        heads: Iterable[int] | int | None = None,
        dtype: str = "float32",
        truncate: bool = False,
        ablation=None,
    ) -> list[Capture]:
        """Capture attention quantities for each text.

        Args:
          texts: strings, or (sentence_a, sentence_b) pairs.
          what: quantity names (see `jaxattn.QUANTITIES`).
          layers: layer indices, or None for all.
          heads: head indices, or None for all.
          dtype: output encoding: float32 (exact), float16, bfloat16, uint8.
          truncate: cut texts longer than the model's maximum instead of raising.
          ablation: a `jaxattn.ablation.HeadAblation` to disable heads, or None.

        Returns:
          One Capture per text, in input order.

        Raises:
          ValueError: a bad text, an unknown quantity or dtype, an index out of
            range, a text over the length limit (unless truncate).
        """
        spec = self.make_spec(what, layers, heads, dtype)
        encodings = self.tokenize(texts, truncate)
        out: list[Capture | None] = [None] * len(encodings)
        for pos, cap in self.run(encodings, spec, ablation):
            out[pos] = cap
        return out  # type: ignore[return-value]

    def run(
        self, encodings: Sequence[Encoding], spec: CaptureSpec, ablation=None
    ) -> Iterator[tuple[int, Capture]]:
        """Capture tokenised examples, yielding (position, Capture) as batches finish.

        Examples come grouped by length bucket, not in input order. Dispatch is
        asynchronous: batch k+1 computes while batch k is copied and trimmed.
        `ablation` (a `jaxattn.ablation.HeadAblation`) disables heads; every
        ablation set runs the same compiled program.
        """
        gates = None if ablation is None else ablation.gates(self.config)
        plan = batching.plan(
            [e.length for e in encodings],
            self.buckets,
            lambda t: self.output_bytes(spec, t),
            **self._budgets,
            devices=len(self.devices),
        )
        pending: collections.deque = collections.deque()
        for batch in plan:
            out = self._step(spec, self._params, *self._pack(batch, encodings), gates)
            for leaf in jax.tree.leaves(out):
                leaf.copy_to_host_async()
            pending.append((batch, out))
            if len(pending) >= _PIPELINE_DEPTH:
                yield from self._unpack(*pending.popleft(), encodings, spec)
        while pending:
            yield from self._unpack(*pending.popleft(), encodings, spec)

    def warmup(self, spec: CaptureSpec) -> int:
        """Compile every (bucket, batch size) shape of `spec`; returns the count.

        Inputs are built by the same `_pack` as real batches: the jit cache keys
        on argument types, and numpy inputs would miss programs compiled for
        jax arrays.
        """
        dummy = [Encoding(ids=(0,), type_ids=(0,), tokens=("",), sentence_b_start=None)]
        for length in self.buckets:
            size = batching.batch_size(length, lambda t: self.output_bytes(spec, t),
                                       **self._budgets)  # fmt: skip
            while size >= 1:
                n = size * len(self.devices)
                batch = batching.Batch(length, n, (0,) * n)
                out = self._step(spec, self._params, *self._pack(batch, dummy), None)
                jax.block_until_ready(out)
                size //= 2
        return self.compiled_shapes

    def word_embedding(self) -> np.ndarray:
        """The [V, D] word embedding (the tied MLM decoder), on the host."""
        return np.asarray(self._params["embeddings"]["word"])

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape) programs the step has compiled so far."""
        return self._step._cache_size()

    def output_bytes(self, spec: CaptureSpec, length: int) -> int:
        """Bytes one example padded to `length` returns under `spec`."""
        c = self.config
        sizes = dict(L=len(spec.layers), H=len(spec.heads), T=length, S=length,
                     K=c.head_dim, D=c.hidden_size)  # fmt: skip
        item = ENCODINGS[spec.dtype].itemsize
        total = 0
        for name in spec.what:
            dims = [sizes[a] for a in QUANTITIES[name].axes]
            if name == "hidden_states":
                dims[0] += 1
            total += math.prod(dims) * item
        return total

    # -- host side -----------------------------------------------------------------

    def _pack(self, batch: batching.Batch, encodings: Sequence[Encoding]):
        ids = np.full((batch.size, batch.length), self.config.pad_token_id, np.int32)
        type_ids = np.zeros((batch.size, batch.length), np.int32)
        mask = np.zeros((batch.size, batch.length), bool)
        for r, pos in enumerate(batch.rows):
            e = encodings[pos]
            ids[r, : e.length] = e.ids
            if self.config.type_vocab_size:
                type_ids[r, : e.length] = e.type_ids
            mask[r, : e.length] = True
        # Dummy rows padding a data-parallel remainder: one real key, so their
        # softmax stays finite; their outputs are never read.
        mask[len(batch.rows) :, 0] = True
        # Placed on this engine's (process-local) mesh here: in a multi-process
        # job jit refuses host arrays with a batch sharding, and one placement
        # rule for every process count keeps warmup and run on the same programs.
        return tuple(jax.device_put(x, self._batch_sharding) for x in (ids, type_ids, mask))

    def _unpack(self, batch, out, encodings, spec) -> Iterator[tuple[int, Capture]]:
        host = jax.device_get(out)
        for r, pos in enumerate(batch.rows):
            e = encodings[pos]
            tensors, quant = {}, {}
            for name, enc in host.items():
                axes = QUANTITIES[name].axes
                trim = tuple(slice(0, e.length) if a in "TS" else slice(None) for a in axes)
                tensors[name] = np.ascontiguousarray(enc["data"][r][trim])
                if spec.dtype == "uint8":
                    if "scale" in enc:
                        quant[name] = (float(enc["scale"][r]), float(enc["offset"][r]))
                    else:
                        quant[name] = (PROBABILITY_SCALE, 0.0)
            yield (
                pos,
                Capture(
                    tokens=e.tokens,
                    sentence_b_start=e.sentence_b_start,
                    layers=spec.layers,
                    heads=spec.heads,
                    dtype=spec.dtype,
                    tensors=tensors,
                    quantization=quant,
                ),
            )
