"""What a correct answer is: received Captures checked against reference captures.

Numpy only (no jax): the load test's client side. References are float32
captures computed by an in-process engine; each received tensor must be

* float32: bit-identical to a reference;
* float16 / bfloat16 / uint8: within the output dtype's documented error of a
  reference (`jaxattn.dtypes.DTYPES`: relative 2^-11 for float16, relative 2^-8
  for bfloat16, absolute scale / 2 = (max - min) / 510 for uint8).

"A reference", because the engine's float32 results depend, in the last bits,
on how many examples share a compiled batch (XLA picks kernels by shape), and
under micro-batching a client cannot know its batch size: a reference is kept
for every batch size the engine may use (see `jaxattn.bench.mix`), and
an answer is right when it matches one of them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxattn.dtypes import DTYPES

# Half the spacing of float16's subnormals: its absolute error floor.
_F16_FLOOR = 2.0**-25
_F16_MAX = 65504.0


@dataclasses.dataclass(frozen=True)
class ExampleExpectation:
    """The right answer for one example of a request.

    Attributes:
      tokens, sentence_b_start, layers, heads: the header fields.
      candidates: quantity name -> float32 reference arrays (one per distinct
        result over the batch sizes the engine may run the example in).
    """

    tokens: tuple[str, ...]
    sentence_b_start: int | None
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    candidates: dict[str, tuple[np.ndarray, ...]]


def within_error(got: np.ndarray, ref: np.ndarray, dtype: str, scale: float | None) -> bool:
    """Whether a decoded `dtype` tensor is within that dtype's documented error of `ref`."""
    if got.shape != ref.shape:
        return False
    if dtype == "float32":
        return got.dtype == np.float32 and np.array_equal(got, ref)
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    if dtype == "uint8":
        # Dequantisation itself rounds (q * scale + offset in float32).
        bound = 0.5 * scale + 2.0**-22 * (np.abs(r) + 255.0 * scale)
    elif dtype == "float16":
        if np.any(np.abs(r) > _F16_MAX):
            return False  # out of float16's documented range
        bound = DTYPES[dtype].relative_error * np.abs(r) + _F16_FLOOR
    else:
        bound = DTYPES[dtype].relative_error * np.abs(r) + 1e-38
    return bool(np.all(np.abs(g - r) <= bound * (1 + 1e-6)))


def check_capture(cap, expected: ExampleExpectation) -> str | None:
    """None when `cap` (a received Capture) is a right answer, else what is wrong."""
    for field in ("tokens", "sentence_b_start", "layers", "heads"):
        got, want = getattr(cap, field), getattr(expected, field)
        if (tuple(got) if isinstance(got, (list, tuple)) else got) != want:
            return f"{field} {got!r} != {want!r}"
    if set(cap.tensors) != set(expected.candidates):
        return f"tensors {sorted(cap.tensors)} != {sorted(expected.candidates)}"
    for name, refs in expected.candidates.items():
        encoded, scale, _ = cap.encoded(name)
        got = cap.array(name)
        if cap.dtype == "uint8" and encoded.dtype != np.uint8:
            return f"{name}: uint8 capture with {encoded.dtype} data"
        if not any(within_error(got, ref, cap.dtype, scale) for ref in refs):
            ref = refs[0]
            diff = (
                float(np.max(np.abs(got.astype(np.float64) - ref)))
                if got.shape == ref.shape
                else float("nan")
            )
            return (
                f"{name} ({cap.dtype}): outside the documented error of all {len(refs)} "
                f"references (shape {got.shape} vs {ref.shape}, max |diff| {diff:.3g})"
            )
    return None


def check_answer(caps, expected: list[ExampleExpectation]) -> str | None:
    """None when a request's Captures are all right and none is missing or extra."""
    if len(caps) != len(expected):
        return f"{len(caps)} examples answered, {len(expected)} asked"
    for i, (cap, exp) in enumerate(zip(caps, expected, strict=True)):
        problem = check_capture(cap, exp)
        if problem:
            return f"example {i}: {problem}"
    return None


# The budgets `jaxattn serve` loads its engine with (jaxattn.Engine's defaults):
# they cap the batch size the engine can give an example of a bucket.
ENGINE_OUTPUT_BUDGET = 256 << 20
ENGINE_TOKEN_BUDGET = 16384
ENGINE_MAX_BATCH = 64


def batch_sizes(engine, spec, bucket: int, max_batch: int = ENGINE_MAX_BATCH) -> list[int]:
    """1, 2, 4, ... up to the largest batch the engine may give an example of `bucket`."""
    cap = min(
        max_batch,
        ENGINE_OUTPUT_BUDGET // max(1, engine.output_bytes(spec, bucket)),
        ENGINE_TOKEN_BUDGET // bucket,
    )
    sizes, s = [], 1
    while s <= max(cap, 1):
        sizes.append(s)
        s *= 2
    return sizes


def build_expectations(
    engine, requests, max_batch: int = ENGINE_MAX_BATCH
) -> list[list[ExampleExpectation]]:
    """The right answers to `requests` (LoadRequests), from an in-process engine.

    Every distinct example is captured in float32 in batches of every size the
    server's engine may run it in (1, 2, 4, ... up to what its bucket allows),
    with other examples of the same bucket as batch mates; the distinct results
    become its references. Only `engine.make_spec`, `tokenize`, `run`,
    `buckets` and `output_bytes` are used (nothing here imports jax).
    `max_batch`: the server engine's largest batch.
    """
    plans = []  # per request: (spec, keys of its examples)
    examples: dict = {}  # (spec, text) -> TokenizedText
    for r in requests:
        spec = engine.make_spec(r.what, r.layers, r.heads, "float32")
        texts = [t if isinstance(t, str) else tuple(t) for t in r.texts]
        tokenized = engine.tokenize(texts)
        keys = [(spec, t) for t in texts]
        examples.update(zip(keys, tokenized, strict=True))
        plans.append(keys)
    groups: dict = {}  # (spec, bucket) -> keys
    for key, enc in examples.items():
        bucket = next(b for b in engine.buckets if b >= enc.length)
        groups.setdefault((key[0], bucket), []).append(key)
    refs: dict = {key: {} for key in examples}  # key -> name -> [arrays]
    for (spec, bucket), keys in groups.items():
        for size in batch_sizes(engine, spec, bucket, max_batch):
            for start in range(0, len(keys), size):
                chunk = keys[start : start + size]
                batch = [examples[k] for k in chunk]
                batch += [batch[0]] * (size - len(batch))  # exactly `size` rows
                for pos, cap in engine.run(batch, spec):
                    if pos >= len(chunk):
                        continue
                    for name, array in cap.tensors.items():
                        known = refs[chunk[pos]].setdefault(name, [])
                        if not any(np.array_equal(array, k) for k in known):
                            known.append(array)
    out = []
    for keys in plans:
        exps = []
        for key in keys:
            enc, spec = examples[key], key[0]
            exps.append(
                ExampleExpectation(
                    tokens=tuple(enc.tokens),
                    sentence_b_start=enc.sentence_b_start,
                    layers=tuple(spec.layers),
                    heads=tuple(spec.heads),
                    candidates={n: tuple(a) for n, a in refs[key].items()},
                )
            )
        out.append(exps)
    return out
