"""Fixtures of the Hub tests: a loopback stand-in for the Hub (`standin`) serving tiny
models, and a process per download (`resolve`), each with its own Hugging Face cache.

Repositories served (built from the session's tiny BERT checkpoint):

    org/tiny-bert   main: the checkpoint, plus files loading does not need (README,
                    pytorch_model.bin, tf_model.h5, onnx/model.onnx); tag v1.0: an
                    older commit whose weights are halved
    org/t5          a model_type jaxattn does not read
    org/bad-act     the checkpoint with an activation jaxattn does not compute
    org/own-field   the checkpoint with a config field jaxattn does not know
    org/gated       the checkpoint, opened only by the token "hf_right"
    org/sharded     the checkpoint as model.safetensors.index.json and two shards
"""

from __future__ import annotations

import json
import os

import pytest
from hub_helpers import ROOT, checkpoint_files, load_weights, sharded
from safetensors.numpy import save
from standin import HubStandIn  # tests/hub is on sys.path (pytest prepends it)


@pytest.fixture(scope="session")
def hub(checkpoint_dirs):
    """The stand-in, started, with its repositories; `hub.commits[name]` are their commits."""
    files = checkpoint_files(checkpoint_dirs["bert"])
    halved = {
        k: (v * 0.5).astype(v.dtype) for k, v in load_weights(files["model.safetensors"]).items()
    }
    extra = {
        "README.md": b"# tiny\n",
        "pytorch_model.bin": b"not needed" * 50,
        "tf_model.h5": b"not needed",
        "onnx/model.onnx": b"not needed",
    }
    t5 = {
        "config.json": json.dumps({"model_type": "t5", "num_layers": 2}).encode(),
        "model.safetensors": files["model.safetensors"],
        "tokenizer.json": files["tokenizer.json"],
    }
    config = json.loads(files["config.json"])

    def configured(**fields) -> dict[str, bytes]:
        return files | {"config.json": json.dumps(config | fields).encode()}

    stand_in = HubStandIn().start()
    stand_in.commits = {
        "v1.0": stand_in.add(
            "org/tiny-bert", files | {"model.safetensors": save(halved)}, tags=("v1.0",)
        ),
        "main": stand_in.add("org/tiny-bert", files | extra),
        "t5": stand_in.add("org/t5", t5),
        "bad-act": stand_in.add("org/bad-act", configured(hidden_act="bogus")),
        "own-field": stand_in.add("org/own-field", configured(my_field=1)),
        "gated": stand_in.add("org/gated", files, token="hf_right"),
        "sharded": stand_in.add("org/sharded", sharded(dict(files))),
    }
    stand_in.files = files
    yield stand_in
    stand_in.stop()


@pytest.fixture(autouse=True)
def _clean(request):
    """Every test starts with no request counted and no fault armed."""
    if "hub" in request.fixturenames:
        stand_in = request.getfixturevalue("hub")
        stand_in.requests.clear()
        stand_in.faults.clear()


@pytest.fixture
def hub_env(hub, tmp_path) -> dict[str, str]:
    """The environment of a process that downloads from the stand-in into its own cache."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING_FACE", "TRANSFORMERS_OFFLINE"))
    }
    env |= {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    }
    return env
