"""A generation group the device cannot hold (`Continuations._start`): where starting a
group of prompts (its key/value caches, a prefill chunk) runs out of device memory, its
first half starts and the rest waits first, down to one prompt, each continuation what
it is alone; one prompt that does not fit alone is a DeviceMemoryError naming its
numbers; any other XLA error is not caught. XLA's failure is simulated (this CPU does
not run out), as tests/test_out_of_memory.py does for captures."""

from __future__ import annotations

import jax
import pytest
from generate_support import MAKERS

import jaxattn
from jaxattn.engine import kv_cache
from jaxattn.errors import DeviceMemoryError

TEXTS = ["The quick brown fox", "Hello, world. Hello,", "a", "one two three", "x y"]
NEW = 5
OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB."


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return jaxattn.load(MAKERS["gpt2"](tmp_path_factory.mktemp("gpt2")), buckets=(32,))


@pytest.fixture
def starts(monkeypatch):
    """The group sizes started, and `fits`: the most prompts a group may hold before
    starting it fails as XLA fails without memory (None: any)."""
    start = kv_cache.KVDecoder.start
    seen = {"sizes": [], "fits": None, "error": OOM}

    def failing(self, prompts, need, gates=None, padded=True):
        fits = seen["fits"]
        if fits is not None and len(prompts) > fits:
            raise jax.errors.JaxRuntimeError(seen["error"])
        seen["sizes"].append(len(prompts))
        return start(self, prompts, need, gates, padded)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", failing)
    return seen


def test_a_group_out_of_memory_runs_in_halves_with_the_same_tokens(gpt2, starts):
    want = [g.ids for g in gpt2.generate(TEXTS, NEW, stop_at_eos=False)]
    assert starts["sizes"] == [5]
    starts["sizes"].clear()
    starts["fits"] = 2
    got = gpt2.generate(TEXTS, NEW, stop_at_eos=False)
    assert [g.ids for g in got] == want
    assert starts["sizes"] == [2, 1, 2]  # 5 -> 3 + 2, 3 -> 2 + 1


def test_one_prompt_that_does_not_fit_alone_is_named_and_other_errors_pass(gpt2, starts):
    starts["fits"] = 0
    n = gpt2.tokenize(["one two three"])[0].length  # the tiny vocabulary's pieces
    with pytest.raises(DeviceMemoryError) as e:
        gpt2.generate(["one two three"], NEW)
    message = str(e.value)
    assert message.startswith(f"a prompt of {n} tokens continued by up to {NEW} does not fit")
    # it feeds n + 4 positions (the last new token is never fed): a cache of 16
    assert f"it feeds {n + NEW - 1} positions, a key/value cache of 16 positions" in message
    assert "RESOURCE_EXHAUSTED" in message
    starts["error"] = "INTERNAL: something else"
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        gpt2.generate(["one two three"], NEW)


def test_after_a_largest_warmup_the_halves_are_not_padded_back(gpt2, monkeypatch):
    # After warmup("largest") every group pads to the largest batch: a half padded so
    # would hold the same caches again. The device here holds caches of 2 rows at most.
    d = gpt2.kv_decoder
    want = [g.ids for g in gpt2.generate(TEXTS, NEW, stop_at_eos=False)]
    empty, batches = kv_cache.KVDecoder.empty, []

    def small_device(self, shape):
        batches.append(shape.batch)
        if shape.batch > 2:
            raise jax.errors.JaxRuntimeError(OOM)
        return empty(self, shape)

    monkeypatch.setattr(kv_cache.KVDecoder, "empty", small_device)
    monkeypatch.setattr(d, "_largest", True)  # as warmup("largest") leaves it
    got = gpt2.generate(TEXTS, NEW, stop_at_eos=False)
    assert [g.ids for g in got] == want
    largest = d.sizes(d.cache_length(max(d.need(p.length, NEW) for p in gpt2.tokenize(TEXTS))))
    # the largest once, then groups of their own size (halved while over 2)
    assert batches[0] == largest[-1] > 2 and largest[-1] not in batches[1:]
