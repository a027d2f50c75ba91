"""Data parallel over several local devices: same captures as one device.

The devices are fake CPU devices (--xla_force_host_platform_device_count), so
the check runs in a subprocess: the flag must be set before jax starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from xla_env import flags

from jaxattn.capture import Capture

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jaxattn
    ckpt, out, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    assert jax.local_device_count() == 4, jax.local_devices()
    engine = jaxattn.load(ckpt, max_batch=2)
    texts = [tuple(t) if isinstance(t, list) else t for t in texts]
    what = ("attention", "sum_alpha_fx_norm", "hidden_states")
    for i, cap in enumerate(engine.capture(texts, what=what, dtype="float32")):
        cap.save(f"{out}/{i}.npz")
    print(len(engine.devices))
    """
)


def test_four_devices_capture_what_one_device_does(engines, bert_checkpoint, tmp_path):
    words = "i went to the store at fresh strawberries bought".split()
    # 11 texts of 3-8 tokens (one bucket, one shape to compile): two full 4-device
    # batches and a padded remainder of 3.
    texts = [" ".join(words[: 1 + i % 6]) for i in range(10)] + [["i went", "at ."]]
    env = dict(os.environ, XLA_FLAGS=flags("--xla_force_host_platform_device_count=4"))
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(bert_checkpoint), str(tmp_path), json.dumps(texts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("4")
    texts = [tuple(t) if isinstance(t, list) else t for t in texts]
    want = engines["bert"].capture(texts, what=("attention", "sum_alpha_fx_norm", "hidden_states"))
    for i, ref in enumerate(want):
        got = Capture.load(tmp_path / f"{i}.npz")
        assert got.tokens == ref.tokens
        for name in ref.what:
            # Within float32 rounding, not bit-equal: the 4-device program's per-device
            # batches have other shapes, for which XLA's CPU kernels round differently
            # (hidden states differed by 1.2e-6 on an AVX-512 EPYC). A sharding mistake
            # (a row out of place, a device's results lost) is off by O(1).
            np.testing.assert_allclose(got.array(name), ref.array(name), atol=1e-5, rtol=1e-5)


GENERATE = textwrap.dedent(
    """
    import json, sys
    import jax, jaxattn
    assert jax.local_device_count() == 4, jax.local_devices()
    engine = jaxattn.load(sys.argv[1], max_batch=2)
    texts = json.loads(sys.argv[2])
    gens = engine.generate(texts, 6, stop_at_eos=False)
    # the first three join the last three's group (the longest prompt's cache) after
    # two steps: its batch grows from 4 rows (1 a device) to 8 and their rows go in
    # across the devices
    from jaxattn.engine.generate import Continuations
    prompts = engine.tokenize(texts)
    run = Continuations(engine, prompts[3:], 6, stop_at_eos=False)
    run.step(), run.step()
    before = run._group.shape.batch
    assert run.add(prompts[:3], 6, False, join_only=True) == [3, 4, 5]
    grown = run._group.shape.batch
    while not run.done:
        run.step()
    print(json.dumps([before, grown]))
    joined = [list(g.ids) for g in run.results()]
    print(json.dumps([[list(g.ids) for g in gens], joined[3:] + joined[:3]]))
    """
)


def test_four_devices_generate_what_one_device_does(tmp_path):
    # Six prompts of different lengths in one group of 8 rows, 2 a device (the key/value
    # caches sharded with the batch, two padding rows), and three joining the other
    # three's group (grown, rows inserted across devices), against one device in-process.
    from gpt2_fixture import make_gpt2_checkpoint

    import jaxattn

    path = make_gpt2_checkpoint(tmp_path / "gpt2")
    texts = ["a b c", "the cat sat on the", "Hello", "x y", "one two three four five six", "q"]
    env = dict(os.environ, XLA_FLAGS=flags("--xla_force_host_platform_device_count=4"))
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", GENERATE, str(path), json.dumps(texts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = [list(g.ids) for g in jaxattn.load(path).generate(texts, 6, stop_at_eos=False)]
    *_, shapes, got = proc.stdout.strip().splitlines()
    assert json.loads(shapes) == [4, 8]
    assert json.loads(got) == [want, want]
