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
import functools
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future

import jax
import numpy as np

from jaxattn.capture import Capture, frozen
from jaxattn.capture.part import CapturePart
from jaxattn.config import ModelConfig
from jaxattn.engine import batching, host, layer_groups
from jaxattn.engine.params import check_params, fingerprint_tensors
from jaxattn.engine.pipeline import BatchPipeline, in_order
from jaxattn.engine.step import CaptureStep
from jaxattn.engine.tokenize import TokenizedText, Tokenizer, check_texts
from jaxattn.info import ModelInfo, provenance
from jaxattn.inputs import Text
from jaxattn.selection import Selection
from jaxattn.spec import CaptureSpec, check_precision, spec_for
from jaxattn.stream import CaptureStream, Progress, too_long_policy

# The keyword arguments of a request to `Engine.capture` and `Engine.stream`, which
# both pass on to `Engine._stream` by name.
_REQUEST = (
    "what",
    "layers",
    "heads",
    "dtype",
    "ablation",
    "precision",
    "too_long",
    "generate",
    "stop_at_eos",
    "query_positions",
    "key_positions",
)


def _request(arguments: dict) -> dict:
    """The request among the arguments (`locals()`) of a `capture` or `stream` call."""
    return {k: arguments[k] for k in _REQUEST}


class Engine:
    """A loaded model ready to capture; a `jaxattn.CaptureSource`. Build it with `jaxattn.load`.

    Args:
      config: the model config.
      params: the params tree ({"encoder": ..., optional "pooler", "mlm_head"}). On the
        CPU the engine may share its numpy arrays' memory instead of copying them (jax
        does so for a C-contiguous, 64-byte aligned array: `jaxattn.engine.aligned.placeable`;
        `jaxattn.load`'s are all such), so they must not be changed after; the engine never
        writes into them.
      tokenizer: the checkpoint's tokenizer.
      buckets: candidate bucket lengths (capped at the model's maximum).
      output_budget: most output bytes one batch may return (device memory);
        None: by device (`batching.Budgets.for_devices`: 256 MiB on the CPU,
        an eighth of the free memory, at most 4 GiB, on a GPU/TPU).
      token_budget: most padded tokens per batch (bounds activation memory);
        None: by device (16k on the CPU, 256k on a GPU/TPU).
      max_batch: most examples per batch and device; None: by device (64 / 512).
      pad_fraction: share of a bucket's last batch that may always be dummy
        rows, to compile fewer shapes (`jaxattn.engine.batching`); None: 0.25.
      compile_tokens: what one compile costs in padded tokens: padding past
        pad_fraction is rented against compiling up to this per shape
        (`batching.ShapeLedger`); 0: never; None: by device (8k CPU, 1M GPU/TPU).
      devices: the devices to run on, data-parallel over a 1-D mesh (batch
        sharded, weights replicated); default: every local device.
      host_memory: where the step writes its outputs: "auto" ("staged" on
        GPUs, "pinned" on TPUs, "device" on the CPU), "pinned" (pinned host
        memory), "device" or "staged" (device memory, then a transfer of its
        own to pinned host memory: `jaxattn.engine.step`).
      precision: the default compute precision of captures: "highest" (exact
        float32), "tf32" or "bf16" (`jaxattn.engine.precision`); a capture
        may ask for another.
      layer_loop: how the program runs the layer stack: "auto" (a scan over
        stacked weights on GPUs/TPUs, unrolled on the CPU), "unrolled" or
        "scan" (`jaxattn.engine.layer_loop`); the numbers agree within float32
        rounding.
        None: $JAXATTN_LAYER_LOOP, else "auto".
      attention: how the attention runs: "auto" (blockwise, in memory linear in
        T besides the maps asked for, which are formed for the selected heads only,
        for a capture of quantities the blockwise path serves,
        `jaxattn.engine.blockwise.SERVES`, at a padded length of
        `jaxattn.engine.blockwise.AUTO_MIN_LENGTH` tokens or more with a map,
        `AUTO_MIN_LENGTH_STATS` without; dense below),
        "dense" (always every head's [H, T, T] maps) or "blockwise" (always
        blockwise: a capture asking for a quantity the blockwise path does not
        serve, such as attn_res_norm, or with heads ablated, is refused with a
        UsageError naming it; docs/performance.md "Long inputs"). The numbers
        agree within float32 rounding.
      attention_budget: most bytes of attention working memory one batch may
        hold (the dense path's [H, T, T] maps; the blockwise path's blocks);
        None: by device (`batching.Budgets.for_devices`).
      attention_block: the blockwise path's block size, in query and key tokens
        (a whole number >= 1; None: `jaxattn.engine.blockwise.BLOCK`, 256, measured on
        the CPU: BENCHMARKS.md "Long context (issue 31), CPU"). Each block tensor
        the path holds is H x block^2 x 4 bytes (the attention budget counts one per
        example at this size), and a pass over T tokens runs (T / block)^2 block
        iterations (those past the causal diagonal or a window skipped): larger
        blocks mean fewer, larger iterations, what a GPU favours. Also the block of
        the blockwise forward of layers nothing is captured from
        (`jaxattn.engine.fast_forward`). The numbers agree within float32 rounding
        whatever the size; docs/performance.md "Long inputs".
      layer_group: how an example whose outputs exceed the output budget (on a
        GPU/TPU without `output_budget`: an eighth of the free memory,
        `batching.Budgets.group_bytes`) runs
        (`jaxattn.engine.layer_groups`): None (the default) in groups of as many
        captured layers as fit the budget, each group's program returning its
        layers' outputs only, copied to the host as the next group computes; 0:
        always as one program (the budget then bounds nothing for it); n > 0:
        every multi-layer request in groups of n layers. The numbers agree within
        float32 rounding; affine uint8 quantities always run as one program.
      revision: the Hugging Face Hub commit hash the weights were downloaded at
        (`jaxattn.load` gives it), reported in `info` and every capture's
        provenance; "" for weights from a local directory.
      eos_ids: the token ids a generated continuation stops at (`eos_ids`;
        `jaxattn.load` reads them as transformers' generate does:
        `jaxattn.checkpoints.eos`); None: the tokenizer's EOS token.
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
        compile_tokens: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        host_memory: str = "auto",
        precision: str = "highest",
        layer_loop: str | None = None,
        attention: str = "auto",
        attention_budget: int | None = None,
        attention_block: int | None = None,
        layer_group: int | None = None,
        revision: str = "",
        eos_ids: Sequence[int] | None = None,
    ):
        check_params(config, params["encoder"])
        self.config = config
        self.revision = revision
        self._eos_ids = None if eos_ids is None else tuple(int(i) for i in eos_ids)
        self.tokenizer = tokenizer
        self.precision = check_precision(precision)
        self.extra_params = {k: v for k, v in params.items() if k != "encoder"}
        devices = tuple(devices) if devices else tuple(jax.local_devices())
        host.pool_gb()  # jax's backend runs now: its pinned pool's size read as XLA read it
        engine = weakref.ref(self)  # no cycle: the engine is freed when its last user lets go
        self.pipeline = BatchPipeline(
            config,
            CaptureStep(
                config,
                params["encoder"],
                devices,
                host_memory,
                layer_loop,
                attention,
                block=attention_block,
            ),
            devices,
            batching.buckets_for(config.max_length, buckets),
            batching.Budgets.for_devices(
                devices,
                output_bytes=output_budget,
                tokens=token_budget,
                attention_bytes=attention_budget,
                max_batch=max_batch,
                pad_fraction=pad_fraction,
                compile_tokens=compile_tokens,
            ),
            batching.ShapeLedger(),
            provenance=lambda: engine().provenance,
        )
        self.pipeline.group_policy = layer_groups.GroupPolicy(layer_group)
        # The weights' fingerprint (`info`, every capture's provenance) is made from now on
        # in a thread of its own, the hashing beside whatever comes next (the first
        # capture's programs loading): made at the first capture's first hand-over it was
        # most of a cached first capture's time outside its programs (BENCHMARKS.md).
        self._fingerprint = _fingerprint_later(self.step)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The token ids a generated continuation stops at (`generate`, stop "eos"): the
        checkpoint's generation_config.json eos_token_id (an id or a list: Llama-3-Instruct
        names three), else config.json's, else the tokenizer's EOS token
        (`jaxattn.checkpoints.eos`); () where none is known."""
        if self._eos_ids is not None:
            return self._eos_ids
        eos = self.tokenizer.hf.eos_token_id
        return () if eos is None else (int(eos),)

    # -- the batch pipeline (`jaxattn.engine.pipeline`), which owns the step -----------

    @property
    def step(self) -> CaptureStep:
        """The jitted capture step (the pipeline's; assigning replaces it there)."""
        return self.pipeline.step

    @step.setter
    def step(self, step: CaptureStep) -> None:
        self.pipeline.step = step

    @property
    def devices(self) -> tuple[jax.Device, ...]:
        """The devices the step runs on."""
        return self.pipeline.devices

    @property
    def buckets(self) -> tuple[int, ...]:
        """The bucket lengths, ascending."""
        return self.pipeline.buckets

    @property
    def budgets(self) -> batching.Budgets:
        """The batch budgets."""
        return self.pipeline.budgets

    @property
    def shapes(self) -> batching.ShapeLedger:
        """The ledger of compiled programs and rented padding."""
        return self.pipeline.shapes

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape) programs the step has compiled so far."""
        return self.pipeline.compiled_shapes

    def run(
        self,
        tokenized: Sequence[TokenizedText],
        spec: CaptureSpec,
        ablation=None,
        *,
        parts: bool = False,
        group_bytes: int | None = None,
        skip=None,
        held=None,
    ) -> Iterator[tuple[int, Capture | CapturePart]]:
        """Capture tokenised examples, yielding (position, Capture) as batches finish
        (`BatchPipeline.run`: grouped by length bucket, not in input order; with
        `parts`, an example run in layer groups as (position, CapturePart) per group;
        `group_bytes`: most output bytes of one group, where below the budget; `skip`:
        asked before each group, True stops that example's groups; `held`: how a call
        that keeps every Capture holds them, `BatchPipeline.holding`)."""
        return self.pipeline.run(
            tokenized, spec, ablation, parts=parts, group_bytes=group_bytes, skip=skip, held=held
        )

    def plan(self, tokenized, spec, budgets=None, ablated=False) -> list[batching.Batch]:
        """The batches `run` gives tokenised examples under `spec` now (`BatchPipeline.plan`)."""
        return self.pipeline.plan(tokenized, spec, budgets, ablated)

    def dispatch(self, batch, tokenized, spec, gates=None):
        """Start one batch on the devices (`BatchPipeline.dispatch`)."""
        return self.pipeline.dispatch(batch, tokenized, spec, gates)

    def warmup(
        self, spec: CaptureSpec, sizes: str = "all", stop=None, group_bytes: int | None = None
    ) -> int:
        """Compile the shapes of `spec` before the first call; returns `compiled_shapes`
        (`BatchPipeline.warmup`: sizes "all" or "largest", `stop` to end early; a bucket
        whose examples run in layer groups, under the output budget or `group_bytes` as
        `run`'s, compiles its layer groups' programs)."""
        return self.pipeline.warmup(spec, sizes, stop, group_bytes)

    def output_bytes(self, spec: CaptureSpec, length: int) -> int:
        """Bytes one example padded to `length` returns under `spec`."""
        return self.pipeline.output_bytes(spec, length)

    def group_sizes(
        self, tokenized: Sequence[TokenizedText], spec: CaptureSpec, group_bytes=None
    ) -> list[int]:
        """Layers per group of each tokenised example as `run` (with `group_bytes`) will
        run it under `spec`; 0: as one program (`BatchPipeline.group_sizes`)."""
        return self.pipeline.group_sizes(tokenized, spec, group_bytes)

    def part_bytes(self, spec: CaptureSpec, length: int, group_bytes: int | None = None) -> int:
        """Bytes of the most one example padded to `length` hands over at once under
        `spec`: a layer group's where it runs in groups (`BatchPipeline.part_bytes`)."""
        return self.pipeline.part_bytes(spec, length, group_bytes)

    # -- the CaptureSource API -------------------------------------------------------

    @functools.cached_property
    def weights_fingerprint(self) -> str:
        """A fingerprint of the weights (`jaxattn.engine.params.fingerprint`), made once, in
        a thread of its own from the engine's making on (this waits for it)."""
        return self._fingerprint.result()

    @functools.cached_property
    def info(self) -> ModelInfo:
        """The model: name, sizes, default precision, weights fingerprint, Hub revision."""
        return ModelInfo.of(
            self.config,
            precision=self.precision,
            weights=self.weights_fingerprint,
            revision=self.revision,
        )

    @functools.cached_property
    def provenance(self):
        """What every capture of this engine records about where it came from (read-only)."""
        return frozen(provenance(self.info, self.config.to_dict(), "engine"))

    def model_info(self) -> ModelInfo:
        """The model (same as `info`; `AttentionClient.model_info` answers the same)."""
        return self.info

    def make_spec(
        self,
        what=None,
        layers=None,
        heads=None,
        dtype: str = "float32",
        precision=None,
        *,
        query_positions: Selection = None,
        key_positions: Selection = None,
    ) -> CaptureSpec:
        """Validate a request against this model (UsageError naming the field).

        precision None is the engine's default (`precision`); query_positions and
        key_positions as `capture` (each example's checked as it is captured).
        """
        return spec_for(
            self.config,
            what,
            layers,
            heads,
            dtype,
            self.precision if precision is None else precision,
            query_positions=query_positions,
            key_positions=key_positions,
        )

    def tokenize(
        self, texts: Sequence[Text], *, too_long: str | None = None
    ) -> list[TokenizedText | None]:
        """Check and tokenise texts (errors name the bad text's index).

        too_long: "error" (default; None is the same), "truncate", or "skip"
        (None in the skipped text's place).
        """
        policy = too_long_policy(too_long)
        return self.tokenizer.encode(check_texts(texts), too_long=policy)

    def capture(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        ablation=None,
        precision: str | None = None,
        too_long: str | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> list[Capture]:
        """Capture attention quantities for each text.

        Args:
          texts: strings, or (sentence_a, sentence_b) pairs.
          what: quantity names (see `jaxattn.QUANTITIES`).
          layers: layers, or None for all: an index, a list, negative indices
            from the end, slices, or the CLI's string ("0,3,-1", "8:12";
            `jaxattn.selection.Selection`).
          heads: heads, likewise.
          dtype: output dtype: float32 (exact), float16, bfloat16, uint8.
          ablation: a `jaxattn.engine.HeadAblation` to disable heads, or None.
          precision: compute precision ("highest", "tf32", "bf16"); None: the
            engine's default.
          too_long: a text over the model's maximum: "error" (default) raises
            TooLongError, "truncate" cuts it (`Capture.truncated`), "skip"
            leaves it out of the result.
          query_positions: the query rows the maps keep (attention, scores,
            alpha_fx_norm, sum_alpha_fx_norm, ...: `jaxattn.quantities.MAPS`),
            None for all: token positions of each text (0: its first token,
            [CLS] or BOS), negative ones from each text's own end ("-256:",
            the last 256 tokens of every text), an index, a list, slices with
            both bounds from the start or both from the end; the maps are then
            [L, H, R, S] with `Capture.query_positions` naming the rows.
            Other quantities are whole. docs/python.md "Rows and keys of long texts".
          key_positions: the key positions (columns) the maps keep, likewise
            (`Capture.key_positions`).
          generate: a decoder only: first continue each text by up to this many
            greedily generated tokens (`generate`), then capture prompt +
            continuation from their ids: the Capture's tokens are both, its
            `generated_start` the first generated token's index. too_long then
            applies to prompt + new tokens (`generate`); with `ablation`, the
            ablated model generates too. The continuation is generated at the
            engine's precision (its key/value-cache programs are compiled once for
            it); `precision` is the capture's.
          stop_at_eos: with `generate`: end a continuation at an EOS token (`Engine.eos_ids`).

        Returns:
          One Capture per text (per kept text with "skip"), in input order.
          For many texts, `capture_iter` streams them in bounded memory.
          Held all at once, they stay views of XLA's pinned host memory only up
          to `BatchPipeline.pinned_budget` (half its pool on GPUs, of the blocks any
          kept Capture views, earlier calls' too); the batches
          after are copied into ordinary memory, freeing the pool (`host.HeldResults`).

        Raises:
          UsageError: an unknown quantity or dtype, an index out of range, a
            position outside a text (naming the text and its length), positions
            for a capture of no map.
          InputError: a bad text (TooLongError: over the length limit).
          HostMemoryError: the results come to more than the host's available
            memory (before any capture runs; with `generate`, once the continuations,
            whose lengths it needs, are generated), or fill XLA's pinned host pool.
        """
        return list(self._stream(texts, True, **_request(locals())))

    def stream(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        ablation=None,
        precision: str | None = None,
        too_long: str | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> Iterator[Capture]:
        """Like `capture`, but yield each Capture, in input order, as soon as it and all
        before it are ready (batches finish shortest bucket first). The request is
        checked and tokenised before the first one; with `generate`, every text's
        continuation is generated before the first (`generate_and_stream`). All of
        `texts` is in flight at once: for a corpus, `capture_iter` bounds memory."""
        return self._stream(texts, False, **_request(locals()))

    def _stream(
        self,
        texts,
        hold: bool,
        *,
        what,
        layers,
        heads,
        dtype,
        ablation,
        precision,
        too_long,
        generate,
        stop_at_eos,
        query_positions,
        key_positions,
    ) -> Iterator:
        """`stream` of a request (`capture`'s keyword arguments, `_request`); `hold`: the
        caller keeps every Capture (`capture`), held as `BatchPipeline.holding` says."""
        positions = dict(query_positions=query_positions, key_positions=key_positions)
        generate, stop_at_eos = self._check_generation(generate, stop_at_eos)
        if generate is not None:
            from jaxattn.engine.generate import generate_and_stream

            spec = self.make_spec(what, layers, heads, dtype, precision, **positions)
            _, caps = generate_and_stream(
                self,
                texts,
                generate,
                spec,
                stop_at_eos=stop_at_eos,
                too_long=too_long,
                ablation=ablation,
                hold=hold,
            )
            return caps
        spec, _, kept = self._prepare(
            texts, what, layers, heads, dtype, precision, too_long, positions
        )
        held = self.pipeline.holding(kept, spec) if hold else None
        return in_order(self.run(kept, spec, ablation, held=held))

    def _check_generation(self, generate, stop_at_eos) -> tuple[int | None, bool]:
        """(generate, stop_at_eos) of a capture, checked as the client checks them
        (`check_generation`), an encoder or headless decoder refused before N is."""
        from jaxattn.continuations import check_generation
        from jaxattn.engine.generate import check_generator

        if generate is not None:
            check_generator(self)
        return check_generation(generate, stop_at_eos)

    def _prepare(self, texts, what, layers, heads, dtype, precision, too_long, positions):
        """(spec, the kept texts' indices, their TokenizedTexts): the request checked and
        the texts tokenised, each text's positions checked, before anything runs."""
        spec = self.make_spec(what, layers, heads, dtype, precision, **positions)
        tokenized = self.tokenize(texts, too_long=too_long)
        index = [i for i, t in enumerate(tokenized) if t is not None]
        spec.check_examples((i, tokenized[i].length) for i in index)
        return spec, index, [tokenized[i] for i in index]

    def generate(
        self,
        texts: Sequence[str],
        max_new_tokens: int,
        *,
        stop_at_eos: bool = True,
        too_long: str | None = None,
        ablation=None,
    ) -> list:
        """Greedy continuations of decoder prompts, one `jaxattn.engine.generate.Generation`
        per kept text, in input order (prompt, continuation ids/tokens/text, why it
        stopped): the argmax of the next-token logits as transformers'
        ``generate(do_sample=False)``, each step one token's forward against a cache of
        the keys and values before it (`jaxattn.engine.kv_cache`). stop_at_eos: end at
        an EOS token (`eos_ids`); too_long: for prompt + max_new_tokens ("error",
        "truncate": until the positions are full, "skip").
        Arguments and errors: `jaxattn.engine.generate.generate`."""
        from jaxattn.engine.generate import generate

        out = generate(
            self,
            texts,
            max_new_tokens,
            stop_at_eos=stop_at_eos,
            too_long=too_long,
            ablation=ablation,
        )
        return [g for g in out if g is not None]

    def check_generator(self) -> None:
        """UsageError unless this engine generates: a decoder with its next-token head
        (the message says why not)."""
        from jaxattn.engine.generate import check_generator

        check_generator(self)

    def plan_generation(
        self, texts: Sequence[str], max_new_tokens: int, too_long: str | None = None
    ) -> tuple[list, list]:
        """(each text's prompt, None where too_long="skip" leaves it out; each kept
        prompt grown to its longest continuation, its ids 0: what a capture of it may
        cost at most) before anything is generated: a server's admission
        (`jaxattn.engine.generate.plan_prompts`, `longest`).

        Raises:
          UsageError: this engine does not generate, or max_new_tokens < 1.
          InputError: GenerationTooLongError or TooLongError, as `generate`.
        """
        from jaxattn.continuations import check_new_tokens
        from jaxattn.engine.generate import check_generator, longest, plan_prompts

        check_generator(self)
        new = check_new_tokens(max_new_tokens)
        prompts = plan_prompts(self, texts, new, too_long)
        limit = self.config.max_length
        return prompts, [longest(p, new, limit) for p in prompts if p is not None]

    @functools.cached_property
    def kv_decoder(self):
        """The decoding programs of this decoder (`jaxattn.engine.kv_cache.KVDecoder`): what
        `generate` and a generation's steps run, made at first use."""
        from jaxattn.engine.kv_cache import KVDecoder

        return KVDecoder(self)

    def warmup_generation(self, sizes: str = "all", stop=None) -> int:
        """Compile the programs a generation's steps run (`KVDecoder.warmup`: its prefill
        and step for every cache length of the buckets, every batch size of the ladder
        or the largest only) before the first generation (`jaxattn serve --warmup` does,
        for a server that generates); returns how many programs it compiled."""
        return self.kv_decoder.warmup(sizes, stop)

    def continuations(self, prompts: Sequence, max_new_tokens, *, stop_at_eos=True):
        """A `jaxattn.engine.generate.Continuations` of `prompts` (`plan_generation`'s):
        generation a step at a time (`step`), for a caller that interleaves it with
        other work (the server's batcher). max_new_tokens and stop_at_eos: one for all
        prompts, or each prompt's (several requests' prompts run as one)."""
        from jaxattn.engine.generate import Continuations

        return Continuations(self, prompts, max_new_tokens, stop_at_eos=stop_at_eos)

    def capture_iter(
        self,
        texts: Iterable[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        too_long: str = "error",
        precision: str | None = None,
        progress: Progress | None = None,
        window: int | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> CaptureStream:
        """Captures of any number of texts, in input order, in bounded memory.

        `texts` may be any iterable (a generator, a file's lines); it is read
        `window` texts at a time (default: four of the largest batches the
        device runs, 256 on a CPU), so peak memory does not grow with the
        corpus. `progress` is called per input with its Capture (None when
        skipped). The returned `jaxattn.CaptureStream` iterates the Captures and
        keeps `skipped` and `truncated` input indices. With `generate`, a
        window's texts are continued, then captured with their continuations
        (`stream`), window after window. Arguments otherwise as `capture`; the
        request is checked before the first text is read.
        """
        # bad requests fail now
        positions = dict(query_positions=query_positions, key_positions=key_positions)
        spec = self.make_spec(what, layers, heads, dtype, precision, **positions)
        # as checked, once: a generator of positions is read here, not again per window
        positions = dict(query_positions=spec.query_positions, key_positions=spec.key_positions)
        generating = {}
        generate, stop_at_eos = self._check_generation(generate, stop_at_eos)
        if generate is not None:
            generating = dict(generate=generate, stop_at_eos=stop_at_eos)
        if window is None:
            window = 4 * self.budgets.max_batch * len(self.devices)
        return CaptureStream(
            self,
            texts,
            window=window,
            too_long=too_long,
            progress=progress,
            what=what,
            layers=layers,
            heads=heads,
            dtype=dtype,
            precision=precision,
            **positions,
            **generating,
        )

    def capture_layers(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        precision: str | None = None,
        too_long: str | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        group_bytes: int | None = None,
    ) -> Iterator[tuple[int, CapturePart]]:
        """Like `stream`, but yield each text's outputs a layer group at a time, as
        (text index, `jaxattn.capture.part.CapturePart`), in input order: a text whose
        outputs exceed the example budget (`batching.Budgets.group_bytes`, or
        `group_bytes`) in several parts, each as its group lands (at most two groups'
        outputs on the device and in flight), any other in one part of all its
        layers. Arguments as `capture` (a text skipped by too_long="skip" gives none)."""
        positions = dict(query_positions=query_positions, key_positions=key_positions)
        spec, index, kept = self._prepare(
            texts, what, layers, heads, dtype, precision, too_long, positions
        )
        ready: dict[int, collections.deque] = {}
        following = 0
        for pos, item in self.run(kept, spec, parts=True, group_bytes=group_bytes):
            if isinstance(item, Capture):
                item = CapturePart.of(item)
            ready.setdefault(pos, collections.deque()).append(item)
            while ready.get(following):  # the text next in order: pass on what it has
                part = ready[following].popleft()
                yield index[following], part
                if part.last:
                    del ready[following]
                    following += 1

    def close(self) -> None:
        """Nothing to release (the CaptureSource API); the engine stays usable."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def word_embedding(self) -> np.ndarray:
        """The [V, D] word embedding (the tied MLM decoder), on the host."""
        return np.asarray(self.step.params["embeddings"]["word"])


def fingerprint_of(step: CaptureStep) -> str:
    """The fingerprint of `step`'s weights (`params.fingerprint` of `canonical_params`),
    copied to the host one tensor at a time (`canonical_tensors`), never all at once."""
    return fingerprint_tensors(*step.canonical_tensors())


def _fingerprint_later(step: CaptureStep) -> Future:
    """The fingerprint of `step`'s weights made in a thread of its own (the hashing
    releases the interpreter's lock): the Future of it, or of the exception its making
    raised. Not a daemon: a process that exits sooner waits for it (at most what its
    first capture would have spent), so that no copy from the device is under way while
    the backend is torn down."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fingerprint_of(step))
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for it
            future.set_exception(error)

    threading.Thread(target=run, name="jaxattn-fingerprint").start()
    return future
