"""The engine: where jax computes. Texts in, `Capture`s out.

    from jaxattn.engine import Engine          # usually built by jaxattn.load()
    caps = engine.capture(texts, what=("attention",))

The modules, in the order data flows through them:

    tokenize   texts -> TokenizedText (ids, type ids, word pieces)
    batching   length buckets and batch sizes (Budgets, plan_batches)
      ledger     ShapeLedger: shapes compiled, padding rented against compiling
    host       TokenizedText -> padded [B, T] arrays; the step's output -> Captures
    step       CaptureStep: jit(vmap(model)) on a static CaptureSpec, data parallel
      model      the Flax transformer of every family (encoders and causal decoders), one
                 example, declared capture
        attention  multi-head self-attention of every family; relative: DeBERTa's,
                   rotary: rotary positions and local windows; layers: norms, dense
        blockwise  attention without a [T, T] tensor (FlashAttention's recurrence);
                   fast_forward: a layer nothing is captured from
        head_stats Clark et al.'s per-head statistics, on the device
        map_positions  the maps' selected query rows and key positions
      layer_loop its layer stack unrolled or as a scan over stacked weights
      norms      Kobayashi et al.'s norm-based quantities as quadratic forms
      quantize   the output dtype, applied on the device
      precision  compute precision of every contraction (highest, tf32, bf16)
      params     the params tree the model expects
      aligned    host arrays the CPU places without a copy (load's params, scan's stacks)
    engine     Engine: the pipeline above, with the async copy overlapped;
      pipeline   BatchPipeline, owned by the Engine: batches planned, run two deep, unpacked
      oom        a batch out of device memory runs again in halves, an example in groups
      layer_groups  an example's captured layers run and copied a group at a time
    qk_map     the joint query-key map of every head (AttentionViz); qk_reduce: t-SNE/UMAP
    ablation   head ablation (Kovaleva et al. 2019) and its study; mlm, causal_lm: its
               losses (masked LM for encoders, next-token for decoders)
    cache      the persistent compilation cache (on by default, per user)
    program_cache  capture, layer-group and generation programs kept as jax.export exports
                   them: a new process skips tracing
    xla_flags  the XLA flags set by default (GEMMs to cuBLAS on GPUs), applied on import
    generate   a decoder's greedy continuation (Engine.generate), and the capture of
               prompt + continuation from its ids (capture(..., generate=N))
    kv_cache   decoding with a key/value cache: a prefill, then one token a step
               (what generate runs)

The names below resolve on first use: importing a light module of this
package (tokenize, batching, ablation's MODES) does not start jax.
"""

import importlib

from jaxattn.engine import xla_flags

xla_flags.apply()  # before any module of the engine starts a JAX backend

_LAZY = {
    "Engine": "jaxattn.engine.engine",
    "HeadAblation": "jaxattn.engine.ablation",
    "head_ablation_study": "jaxattn.engine.ablation",
    "TokenizedText": "jaxattn.engine.tokenize",
    "Tokenizer": "jaxattn.engine.tokenize",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxattn.engine' has no attribute {name!r}")


__all__ = ["Engine", "HeadAblation", "TokenizedText", "Tokenizer", "head_ablation_study"]
