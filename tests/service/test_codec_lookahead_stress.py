"""The compressed look-ahead under stress (`send.Compressor`, `_serialized`): a job's examples
(whole and in layer-group parts, strided) put at random times while the servicer streams
them compressed; decoded == sent; every codec pool slot back after a disconnect, a compress
error in a looked-ahead example, or many streams on a tiny pool."""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
import types

import numpy as np
import pytest
from capture_samples import cut
from codec_pool_support import free_slots

from jaxattn.capture import Capture
from jaxattn.wire import StreamDecoder, codec_pool
from service.admitted_call import Job
from service.servicer import _serialized


def capture(seed: int, t: int) -> Capture:
    rng = np.random.default_rng(seed)
    block = (rng.integers(0, 4, (4, 3, t + 3, t + 5)) * 0.25).astype(np.float32)
    att = block[:, :, 1 : t + 1, 2 : t + 2]  # strided, as the engine's trimmed views
    hid = (rng.integers(0, 4, (5, t, 16)) * 0.5).astype(np.float32)
    return Capture(
        tokens=tuple(f"w{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0, 1, 2, 3),
        heads=(0, 1, 2),
        dtype="float32",
        tensors={"attention": att, "hidden_states": hid},
        quantization={},
    )


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_random_timing_stream_decodes_to_what_was_sent(coalesce, seed):
    rnd = random.Random(seed)
    n = 7
    caps = [capture(seed * 100 + i, rnd.choice([60, 130, 200])) for i in range(n)]
    items = []
    for i, cap in enumerate(caps):
        if rnd.random() < 0.4:
            items += [(i, p) for p in cut(cap, (0, 1, 3, 4))]
        else:
            items.append((i, cap))
    free = free_slots()
    job = Job(spec=None, tokenized=list(range(n)), lock=threading.Lock())

    def produce():
        for i, item in items:
            time.sleep(rnd.random() * 0.004)
            with job.lock:
                job.put(i, item)

    th = threading.Thread(target=produce)
    th.start()
    parsed = types.SimpleNamespace(
        codec="zstd", max_chunk_bytes=codec_pool.POOL_MIN, coalesce=coalesce
    )
    messages = []
    for m in _serialized(job, parsed):
        messages.append(m)
        if rnd.random() < 0.3:
            time.sleep(0.002)
    th.join()
    decoder = StreamDecoder()
    got = [c for m in messages for c in decoder.feed_all(m)]
    decoder.finish()
    assert len(got) == n
    for g, cap in zip(got, caps, strict=True):
        for name, t in cap.tensors.items():
            assert g.tensors[name].tobytes() == np.ascontiguousarray(t).tobytes(), name
    assert free_slots() == free
    assert job.buffered == 0


@pytest.mark.parametrize("seed", range(4))
def test_disconnect_mid_stream_returns_every_slot(seed):
    rnd = random.Random(seed)
    n = 5
    caps = [capture(seed * 10 + i, 200) for i in range(n)]
    free = free_slots()
    job = Job(spec=None, tokenized=list(range(n)), lock=threading.Lock())
    with job.lock:
        for i, c in enumerate(caps):
            job.put(i, c)
    parsed = types.SimpleNamespace(
        codec="zstd", max_chunk_bytes=codec_pool.POOL_MIN, coalesce=bool(seed % 2)
    )
    gen = _serialized(job, parsed)
    for _ in range(rnd.randint(1, 12)):
        next(gen)
    gen.close()
    assert free_slots() == free


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("bad", [0, 1, 2])
def test_compress_error_in_a_peeked_example_returns_slots(monkeypatch, coalesce, bad):
    from jaxattn.wire import send
    from jaxattn.wire.codecs import compress

    caps = [capture(500 + i, 200) for i in range(3)]
    bad_bytes = np.ascontiguousarray(caps[bad].tensors["hidden_states"]).tobytes()[:4096]

    def failing(data, codec):
        if bytes(memoryview(data)[:4096]) == bad_bytes:
            raise ValueError("boom")
        return compress(data, codec)

    monkeypatch.setattr(send, "compress", failing)
    free = free_slots()
    job = Job(spec=None, tokenized=[0, 1, 2], lock=threading.Lock())
    with job.lock:
        for i, c in enumerate(caps):
            job.put(i, c)
    parsed = types.SimpleNamespace(
        codec="zstd", max_chunk_bytes=codec_pool.POOL_MIN, coalesce=coalesce
    )
    with pytest.raises(ValueError, match="boom"):
        for _ in _serialized(job, parsed):
            pass
    assert free_slots() == free


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_small_pool_many_streams_at_once(monkeypatch, threads, seed):
    """Several streams share a tiny pool (slots run out: items offered again later);
    tensors of odd sizes (last pieces under POOL_MIN)."""
    shared = codec_pool._Pool(threads)
    monkeypatch.setattr(codec_pool, "_pool", shared)
    rnd = random.Random(seed)

    def one(k):
        caps = [capture(seed * 1000 + k * 10 + i, rnd.choice([37, 131, 190])) for i in range(4)]
        job = Job(spec=None, tokenized=list(range(4)), lock=threading.Lock())
        with job.lock:
            for i, c in enumerate(caps):
                job.put(i, c)
        parsed = types.SimpleNamespace(
            codec="zstd",
            max_chunk_bytes=codec_pool.POOL_MIN + 4096 * (k % 3),
            coalesce=bool(k % 2),
        )
        decoder = StreamDecoder()
        got = [c for m in _serialized(job, parsed) for c in decoder.feed_all(m)]
        decoder.finish()
        for g, cap in zip(got, caps, strict=True):
            for name, t in cap.tensors.items():
                assert g.tensors[name].tobytes() == np.ascontiguousarray(t).tobytes()

    with concurrent.futures.ThreadPoolExecutor(4) as callers:
        list(callers.map(one, range(4)))  # each caller's error raised here
    meet = threading.Barrier(threads)
    for j in [shared.executor.submit(meet.wait, 30) for _ in range(threads)]:
        j.result()
    taken = 0
    while shared.slots.take():
        taken += 1
    assert taken == 2 * threads
    shared.executor.shutdown()
