"""A Hub download fetches generation_config.json where the model has one (the EOS ids
generation stops at: `jaxattn.checkpoints.eos`); a model without one downloads as before
(`test_hub_download`: org/tiny-bert has none)."""

from __future__ import annotations

import json
from pathlib import Path

from hub_helpers import checkpoint_files, resolve
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.checkpoints.eos import read_eos_ids


def test_the_generation_config_is_downloaded_and_its_eos_ids_read(hub, hub_env, tmp_path):
    files = checkpoint_files(make_llama_checkpoint(tmp_path / "llama"))
    generation = json.loads(files["generation_config.json"])
    files["generation_config.json"] = json.dumps(generation | {"eos_token_id": [7, 5]}).encode()
    files["README.md"] = b"# not needed\n"
    hub.add("org/tiny-llama", files)
    got = resolve(hub_env, "org/tiny-llama")
    snapshot = Path(got["path"])
    assert "generation_config.json" in got["files"] and "README.md" not in got["files"]
    assert "generation_config.json" in hub.fetched()
    assert (snapshot / "generation_config.json").read_bytes() == files["generation_config.json"]
    assert read_eos_ids(snapshot) == (7, 5)
    assert jaxattn.load(snapshot, buckets=(32,)).eos_ids == (7, 5)
