"""The client side installs light: importing and using it never imports jax, flax or torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = ("jax", "jaxlib", "flax", "torch", "transformers", "orbax")
    # The generated stubs pin grpcio to the generating grpcio-tools: not needed.
    BLOCKED_MODULES = ("jaxattn.v1.attention_pb2_grpc",)

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED or name in BLOCKED_MODULES:
                raise ImportError(f"{name} is blocked: the client must not import it")
            return None

    sys.meta_path.insert(0, Block())
    """
)

USE = textwrap.dedent(
    """
    import tempfile, os
    import numpy as np
    import jaxattn
    from jaxattn.client import AttentionClient, AttentionServiceError
    from jaxattn.wire import StreamDecoder, chunk_example
    from jaxattn import Capture

    cap = Capture(tokens=("[CLS]", "a", "[SEP]"), sentence_b_start=None, layers=(0,),
                  heads=(0, 1), dtype="uint8",
                  tensors={"attention": np.full((1, 2, 3, 3), 85, np.uint8)},
                  quantization={"attention": (1 / 255, 0.0)})
    decoder = StreamDecoder()
    (back,) = [c for m in chunk_example(0, cap, codec="zstd", max_chunk_bytes=1024)
               if (c := decoder.feed(m)) is not None]
    assert np.allclose(back.attention, 1 / 3)
    path = os.path.join(tempfile.mkdtemp(), "cap.npz")
    back.save(path)
    assert Capture.load(path).tokens == cap.tokens
    from jaxattn.views import to_bertviz
    assert to_bertviz(back, torch=False)["attention"][0].shape == (1, 2, 3, 3)
    with AttentionClient("127.0.0.1:1", timeout=2, retries=0) as client:
        try:
            client.model_info()
        except AttentionServiceError as e:
            assert e.code.name == "UNAVAILABLE"
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in
                   ("jax", "jaxlib", "flax", "torch", "transformers"))
    assert not heavy, heavy
    print("client-ok")
    """
)


def test_client_works_with_jax_flax_torch_and_the_grpc_stubs_blocked():
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER + USE], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "client-ok" in result.stdout
