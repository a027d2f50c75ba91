"""The capture engine: texts in, one `Capture` per text out.

texts -> `tokenize` -> `batching.plan_batches` (length buckets, batches sized by
output bytes) -> `host.pack` -> `CaptureStep` (jit(vmap(Encoder.apply)) on a
static CaptureSpec, output dtype on the device, outputs to pinned host memory
on accelerators) -> host copy overlapped with the next batch -> `host.unpack`
(per-example views, no copy) -> Captures, in input order from
`capture`/`stream`, as ready from `run`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Sequence

import jax
import numpy as np

from jaxattn import quantities
from jaxattn.capture import Capture
from jaxattn.config import ModelConfig, ModelInfo
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.engine import batching, host
from jaxattn.engine.oom import in_halves, out_of_memory
from jaxattn.engine.params import check_params
from jaxattn.engine.step import CaptureStep
from jaxattn.engine.tokenize import TokenizedText, Tokenizer, check_texts
from jaxattn.inputs import Text
from jaxattn.spec import CaptureSpec, check_precision, make_spec

# Batches in flight: one computing while the previous one's copy lands.
_PIPELINE_DEPTH = 2


class Engine:
    """A loaded model ready to capture; a `jaxattn.CaptureSource`. Build it with `jaxattn.load`.

    Args:
      config: the model config.
      params: the params tree ({"encoder": ..., optional "pooler", "mlm_head"}).
      tokenizer: the checkpoint's tokenizer.
      buckets: candidate bucket lengths (capped at the model's maximum).
      output_budget: most output bytes one batch may return (device memory);
        None: by device (`batching.Budgets.for_devices`: 256 MiB on the CPU,
        an eighth of the free memory, at most 4 GiB, on a GPU/TPU).
      token_budget: most padded tokens per batch (bounds activation memory);
        None: by device (16k on the CPU, 256k on a GPU/TPU).
      max_batch: most examples per batch and device; None: by device (64 / 512).
      pad_fraction: most share of a bucket's last batch that may be dummy
        rows, to compile fewer shapes (`jaxattn.engine.batching`); None: 0.25.
      devices: the devices to run on, data-parallel over a 1-D mesh (batch
        sharded, weights replicated); default: every local device.
      host_memory: where the step writes its outputs: "auto" (pinned host
        memory on GPUs/TPUs, device memory on the CPU), "pinned" or "device"
        (`jaxattn.engine.step`).
      precision: the default compute precision of captures: "highest" (exact
        float32), "tf32" or "bf16" (`jaxattn.engine.precision`); a capture
        may ask for another.
    """

    def __init__(
        self,
        config: ModelConfig,
        params: dict,
        tokenizer: Tokenizer,
        *,
        buckets: Sequence[int] = batching.DEFAULT_BUCKETS,
        output_budget: int | None = None,
        token_budget: int | None = None,
        max_batch: int | None = None,
        pad_fraction: float | None = None,
        devices: Sequence[jax.Device] | None = None,
        host_memory: str = "auto",
        precision: str = "highest",
    ):
        check_params(config, params["encoder"])
        self.config = config
        self.tokenizer = tokenizer
        self.precision = check_precision(precision)
        self.info = ModelInfo.of(config, precision=precision)
        self.extra_params = {k: v for k, v in params.items() if k != "encoder"}
        self.devices = tuple(devices) if devices else tuple(jax.local_devices())
        self.step = CaptureStep(config, params["encoder"], self.devices, host_memory)
        self.buckets = batching.buckets_for(config.max_length, buckets)
        self.budgets = batching.Budgets.for_devices(
            self.devices, output_bytes=output_budget, tokens=token_budget, max_batch=max_batch,
            pad_fraction=pad_fraction,
        )  # fmt: skip

    # -- the CaptureSource API -------------------------------------------------------

    def model_info(self) -> ModelInfo:
        """The model (same as `info`; `AttentionClient.model_info` answers the same)."""
        return self.info

    def make_spec(
        self, what=None, layers=None, heads=None, dtype: str = "float32", precision=None
    ) -> CaptureSpec:
        """Validate a request against this model (ValueError naming the field).

        precision None is the engine's default (`precision`).
        """
        return make_spec(
            what=what,
            layers=layers,
            heads=heads,
            dtype=dtype,
            num_layers=self.config.num_layers,
            num_heads=self.config.num_heads,
            precision=self.precision if precision is None else precision,
        )

    def tokenize(self, texts: Sequence[Text], truncate: bool = False) -> list[TokenizedText]:
        """Check and tokenise texts (ValueError naming the bad text's index)."""
        return self.tokenizer.encode(check_texts(texts), truncate=truncate)

    def capture(
        self,
        texts: Sequence[Text],
        what: str | Iterable[str] | None = ("attention",),
        layers: Iterable[int] | int | None = None,
        heads: Iterable[int] | int | None = None,
        dtype: str = "float32",
        truncate: bool = False,
        ablation=None,
        precision: str | None = None,
    ) -> list[Capture]:
        """Capture attention quantities for each text.

        Args:
          texts: strings, or (sentence_a, sentence_b) pairs.
          what: quantity names (see `jaxattn.QUANTITIES`).
          layers: layer indices, or None for all.
          heads: head indices, or None for all.
          dtype: output dtype: float32 (exact), float16, bfloat16, uint8.
          truncate: cut texts longer than the model's maximum instead of raising.
          ablation: a `jaxattn.engine.HeadAblation` to disable heads, or None.
          precision: compute precision ("highest", "tf32", "bf16"); None: the
            engine's default.

        Returns:
          One Capture per text, in input order.

        Raises:
          ValueError: a bad text, an unknown quantity or dtype, an index out of
            range, a text over the length limit (unless truncate).
        """
        return list(self.stream(texts, what, layers, heads, dtype, truncate=truncate,
                                ablation=ablation, precision=precision))  # fmt: skip

    def stream(
        self,
        texts: Sequence[Text],
        what: str | Iterable[str] | None = ("attention",),
        layers: Iterable[int] | int | None = None,
        heads: Iterable[int] | int | None = None,
        dtype: str = "float32",
        *,
        truncate: bool = False,
        ablation=None,
        precision: str | None = None,
    ) -> Iterator[Capture]:
        """Like `capture`, but yield each Capture, in input order, as soon as it and all
        before it are ready (batches finish shortest bucket first). The request is
        checked and tokenised before the first one."""
        spec = self.make_spec(what, layers, heads, dtype, precision)
        tokenized = self.tokenize(texts, truncate)
        return self._in_order(self.run(tokenized, spec, ablation))

    @staticmethod
    def _in_order(results: Iterator[tuple[int, Capture]]) -> Iterator[Capture]:
        ready: dict[int, Capture] = {}
        following = 0
        for pos, cap in results:
            ready[pos] = cap
            while following in ready:
                yield ready.pop(following)
                following += 1

    def close(self) -> None:
        """Nothing to release (the CaptureSource API); the engine stays usable."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- batches -----------------------------------------------------------------------

    def run(
        self, tokenized: Sequence[TokenizedText], spec: CaptureSpec, ablation=None
    ) -> Iterator[tuple[int, Capture]]:
        """Capture tokenised examples, yielding (position, Capture) as batches finish.

        Examples come grouped by length bucket, not in input order. Dispatch is
        asynchronous: batch k+1 computes while batch k is copied and trimmed.
        `ablation` (a `jaxattn.engine.HeadAblation`) disables heads; every
        ablation set runs the same compiled program. A batch that does not fit
        the device's memory is run again in halves.

        Raises:
          DeviceMemoryError: one example alone does not fit the device.
        """
        gates = None if ablation is None else ablation.gates(self.config)
        args = (tokenized, spec, gates)
        pending: collections.deque = collections.deque()
        for batch in self.plan(tokenized, spec, self.budgets):
            try:
                pending.append((batch, self.dispatch(batch, *args)))
            except Exception as e:
                if not out_of_memory(e):
                    raise
                yield from self._drain(pending, *args)  # free what is in flight first
                yield from in_halves(self, batch, *args, e)
            if len(pending) >= _PIPELINE_DEPTH:
                yield from self._finish(*pending.popleft(), *args, pending)
        yield from self._drain(pending, *args)

    def plan(self, tokenized, spec, budgets=None) -> list[batching.Batch]:
        """The batches `run` gives tokenised examples under `spec` (budgets: the engine's)."""
        lengths, budgets = [e.length for e in tokenized], budgets or self.budgets
        return batching.plan_batches(lengths, self.buckets, lambda t: self.output_bytes(spec, t),
                                     budgets, devices=len(self.devices))  # fmt: skip

    def dispatch(self, batch, tokenized, spec, gates=None):
        """Start one batch on the devices (asynchronously); its output, copies begun."""
        arrays = self.step.place(*host.pack(batch, tokenized, self.config, spec))
        out = self.step(spec, *arrays, gates)
        host.start_copies(out)
        return out

    def _finish(self, batch, out, tokenized, spec, gates, pending) -> Iterator[tuple[int, Capture]]:
        try:
            blocks = host.host_blocks(out)  # waits: an asynchronous failure surfaces here
        except Exception as e:
            if not out_of_memory(e):
                raise
            del out
            yield from self._drain(pending, tokenized, spec, gates)  # free what is in flight
            yield from in_halves(self, batch, tokenized, spec, gates, e)
            return
        yield from host.unpack(batch, blocks, tokenized, spec)

    def _drain(self, pending, tokenized, spec, gates) -> Iterator[tuple[int, Capture]]:
        while pending:
            yield from self._finish(*pending.popleft(), tokenized, spec, gates, pending)

    def warmup(self, spec: CaptureSpec) -> int:
        """Compile every (bucket, batch size) shape of `spec`; returns the count.

        Inputs go through the same `host.pack` and `CaptureStep.place` as real
        batches: the jit cache keys on argument types.
        """
        dummy = [TokenizedText(ids=(0,), type_ids=(0,), tokens=("",), sentence_b_start=None)]
        for length in self.buckets:
            largest = batching.batch_size(length, lambda t: self.output_bytes(spec, t),
                                          self.budgets)  # fmt: skip
            for size in batching.ladder(largest, self.budgets.size_step):
                n = size * len(self.devices)
                batch = batching.Batch(length, n, (0,))
                arrays = self.step.place(*host.pack(batch, dummy, self.config, spec))
                jax.block_until_ready(self.step(spec, *arrays, None))
        return self.compiled_shapes

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape) programs the step has compiled so far."""
        return self.step.compiled_shapes

    def output_bytes(self, spec: CaptureSpec, length: int) -> int:
        """Bytes one example padded to `length` returns under `spec`."""
        c = self.config
        sizes = dict(L=len(spec.layers), H=len(spec.heads), T=length, S=length,
                     K=c.head_dim, D=c.hidden_size)  # fmt: skip
        item = OUTPUT_DTYPES[spec.dtype].itemsize
        return sum(quantities.size(name, sizes) for name in spec.what) * item

    def word_embedding(self) -> np.ndarray:
        """The [V, D] word embedding (the tied MLM decoder), on the host."""
        return np.asarray(self.step.params["embeddings"]["word"])
