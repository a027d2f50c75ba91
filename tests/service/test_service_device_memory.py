"""Work too large for the device even alone (`jaxattn.DeviceMemoryError`, after the
engine's own halving) is RESOURCE_EXHAUSTED with `jaxattn-limit: device_memory` and the
engine's numbers, not INTERNAL (a server bug); other engine failures stay INTERNAL. A
generation whose key/value cache the device cannot hold is the case (XLA's failure
simulated: this CPU does not run out)."""

from __future__ import annotations

import grpc
import jax
import pytest
from local_server import running_server

from jaxattn.client import AttentionClient
from jaxattn.client.errors import AttentionServiceError
from jaxattn.engine import kv_cache


@pytest.mark.parametrize(
    "error, code, limit",
    [
        ("RESOURCE_EXHAUSTED: Out of memory allocating 9.00GiB", "RESOURCE_EXHAUSTED", True),
        ("INTERNAL: something else", "INTERNAL", False),
    ],
)
def test_a_generation_the_device_cannot_hold(svc_gpt2, monkeypatch, error, code, limit):
    def start(self, prompts, need, gates=None, padded=True):
        raise jax.errors.JaxRuntimeError(error)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", start)
    with running_server(svc_gpt2) as (_, address), AttentionClient(address) as client:
        with pytest.raises(AttentionServiceError) as e:
            client.capture(["one two three"], what=["attention"], generate=4)
    assert e.value.code == getattr(grpc.StatusCode, code)
    assert e.value.limit == ("device_memory" if limit else None)
    if limit:
        assert "does not fit the device's memory even alone" in e.value.message
        assert "key/value cache of 16 positions" in e.value.message


def test_a_full_pinned_host_pool_is_its_own_limit_end_to_end(svc_engine, monkeypatch):
    """XLA's pinned host pool exhausted under a call (`jaxattn.HostMemoryError`, not
    halved) reaches the client as RESOURCE_EXHAUSTED with `jaxattn-limit: host_memory`,
    not device_memory: the engine's error, through the batcher and the servicer."""
    step = svc_engine.step

    class PoolFull:
        def __getattr__(self, name):
            return getattr(step, name)

        def __call__(self, *args):
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 2.25GiB "
                "with allocator xla_gpu_host_bfc on device 0"
            )

    monkeypatch.setattr(svc_engine, "step", PoolFull())
    with running_server(svc_engine) as (_, address), AttentionClient(address) as client:
        with pytest.raises(AttentionServiceError) as e:
            client.capture(["one two three"], what=["attention"])
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.value.limit == "host_memory"
    assert "XLA's pinned host memory pool (xla_gpu_host_bfc" in e.value.message
