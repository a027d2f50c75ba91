"""Models by their Hub name, through the real huggingface_hub code path against the
loopback stand-in (`standin`): what is downloaded, the cache, offline, revisions, gated
and missing models, downloads cut off, a full disk, a family jaxattn does not read.

Each download runs in a process of its own with its own HF_HOME (`conftest.resolve`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from hub_helpers import NEEDED, closed_endpoint, resolve

from jaxattn.config import FAMILIES


def _blobs(env) -> list[Path]:
    return sorted(Path(env["HF_HOME"]).rglob("blobs/*"))


def test_first_download_fetches_only_what_loading_needs(hub, hub_env):
    got = resolve(hub_env, "org/tiny-bert")
    assert got["revision"] == hub.commits["main"] and got["name"] == "org/tiny-bert"
    snapshot = Path(got["path"])
    assert snapshot == Path(
        hub_env["HF_HOME"], "hub/models--org--tiny-bert/snapshots", hub.commits["main"]
    )
    assert got["files"] == sorted(NEEDED)
    assert sorted(hub.fetched()) == sorted(NEEDED)  # no README, .bin, .h5 or onnx/
    for name in NEEDED:
        assert (snapshot / name).read_bytes() == hub.files[name]


def test_a_cached_model_loads_with_the_hub_unreachable_or_offline(hub, hub_env):
    first = resolve(hub_env, "org/tiny-bert")
    hub.requests.clear()
    stopped = hub_env | {"HF_ENDPOINT": closed_endpoint()}  # the server stopped
    assert resolve(stopped, "org/tiny-bert") == first
    assert resolve(hub_env | {"HF_HUB_OFFLINE": "1"}, "org/tiny-bert") == first
    assert hub.requests == []


def test_the_hub_unreachable_and_nothing_cached_is_one_line_naming_the_model(hub_env):
    got = resolve(hub_env | {"HF_ENDPOINT": closed_endpoint()}, "org/tiny-bert")
    assert got["error"] == "HubUnreachableError" and "ConnectionError" in got["bases"]
    assert got["message"].startswith("cannot reach the Hub for org/tiny-bert (ConnectError: ")
    assert "give a local directory" in got["message"] and "HF_HUB_OFFLINE=1" in got["message"]


def test_offline_with_nothing_cached_is_a_model_not_found(hub, hub_env):
    got = resolve(hub_env | {"HF_HUB_OFFLINE": "1"}, "org/tiny-bert@v1.0")
    assert got["error"] == "ModelNotFoundError" and "FileNotFoundError" in got["bases"]
    assert (
        "org/tiny-bert@v1.0 is neither a local directory nor in the Hugging Face cache"
        in (got["message"])
    )
    assert "unset HF_HUB_OFFLINE" in got["message"] and hub.requests == []


def test_a_revision_pins_a_tag_or_a_commit(hub, hub_env):
    tag = resolve(hub_env, "org/tiny-bert@v1.0")
    assert tag["revision"] == hub.commits["v1.0"] != hub.commits["main"]
    by_commit = resolve(hub_env, "org/tiny-bert", revision=hub.commits["v1.0"])
    assert by_commit == tag
    halved = Path(tag["path"], "model.safetensors").read_bytes()
    assert halved != hub.files["model.safetensors"]
    main = resolve(hub_env, "org/tiny-bert")
    assert main["revision"] == hub.commits["main"] and main["path"] != tag["path"]
    missing = resolve(hub_env, "org/tiny-bert@v9")
    assert missing["error"] == "ModelNotFoundError"
    assert missing["message"].startswith("org/tiny-bert has no revision 'v9' on the Hub")


def test_a_gated_model_needs_a_token_with_access(hub, hub_env):
    anonymous = resolve(hub_env, "org/gated")
    assert anonymous["error"] == "GatedModelError" and "PermissionError" in anonymous["bases"]
    assert "org/gated is a gated model" in anonymous["message"]
    assert "set HF_TOKEN" in anonymous["message"] and "none is set" in anonymous["message"]
    wrong = resolve(hub_env | {"HF_TOKEN": "hf_wrong"}, "org/gated")
    assert wrong["error"] == "GatedModelError" and "has no access" in wrong["message"]
    statuses = [h.get("authorization") for _, p, h in hub.requests if "/resolve/" in p]
    assert statuses == [None, "Bearer hf_wrong"]  # 401, then 403
    right = resolve(hub_env | {"HF_TOKEN": "hf_right"}, "org/gated")
    assert right["revision"] == hub.commits["gated"] and right["files"] == sorted(NEEDED)


def test_a_model_not_on_the_hub_is_a_model_not_found(hub, hub_env):
    got = resolve(hub_env, "org/nowhere")
    assert got["error"] == "ModelNotFoundError" and "FileNotFoundError" in got["bases"]
    assert got["message"].startswith(
        f"org/nowhere is neither a local directory nor a model on the Hugging Face Hub "
        f"({hub.endpoint}): check the name"
    )


def test_a_download_cut_off_is_resumed_or_refused_and_never_kept_half(hub, hub_env):
    weights = hub.files["model.safetensors"]
    hub.fault("model.safetensors", "drop-once")  # half, then the connection closes
    got = resolve(hub_env, "org/tiny-bert", chunk=4096)
    assert Path(got["path"], "model.safetensors").read_bytes() == weights
    assert any(h.get("range") for _, p, h in hub.requests if p.startswith("/cdn/"))

    other = hub_env | {"HF_HOME": hub_env["HF_HOME"] + "-2"}
    hub.fault("model.safetensors", "short")  # fewer bytes than the Hub announced
    cut = resolve(other, "org/tiny-bert")
    assert cut["error"] == "HubError"
    assert cut["message"].startswith(
        "the download of model.safetensors of org/tiny-bert was cut off"
    )
    assert "nothing half-written was kept" in cut["message"]
    sha = hashlib.sha256(weights).hexdigest()
    left = [p.name for p in Path(other["HF_HOME"]).rglob("*") if p.is_file()]
    assert sha not in left and not [n for n in left if n.endswith(".incomplete")]
    assert not list(Path(other["HF_HOME"]).rglob("snapshots/*/model.safetensors"))

    hub.fault("model.safetensors", None)  # run again: complete
    again = resolve(other, "org/tiny-bert")
    assert Path(again["path"], "model.safetensors").read_bytes() == weights


def test_a_full_disk_is_refused_before_downloading_or_named_when_it_fills(hub, hub_env):
    got = resolve(hub_env, "org/tiny-bert", free=1000)
    assert got["error"] == "HubError"
    assert got["message"].startswith("not enough disk space to download org/tiny-bert")
    assert "HF_HUB_CACHE" in got["message"] and hub.fetched() == ["config.json"]
    full = resolve(hub_env, "org/tiny-bert", enospc=True)
    assert full["error"] == "HubError"
    assert full["message"].startswith("the disk filled up downloading tokenizer.json of org/tiny")
    assert not _blobs(hub_env)[1:]  # config.json only (downloaded in the first call)


def test_a_family_jaxattn_does_not_read_is_refused_before_its_weights(hub, hub_env):
    got = resolve(hub_env, "org/t5")
    assert got["error"] == "CheckpointError"
    assert (
        "org/t5's config.json (nothing else was downloaded): unsupported model_type "
        "'t5'" in got["message"]
    )
    for family in FAMILIES:
        assert family in got["message"]
    assert set(hub.asked()) == {"config.json"}


def test_a_config_jaxattn_cannot_compute_is_refused_before_its_weights(hub, hub_env):
    """What loading refuses of config.json (here an activation; a Pythia's rope type the
    same) is refused once config.json is in, naming the Hub model: the weights were
    downloaded first, then refused naming the cache's snapshot."""
    got = resolve(hub_env, "org/bad-act")
    assert got["error"] == "CheckpointError"
    assert got["message"].startswith(
        "org/bad-act's config.json (nothing else was downloaded): unsupported activation 'bogus'"
    )
    assert set(hub.asked()) == {"config.json"}
    # a field jaxattn does not know is the load's to refuse: ignore_config_fields vouches
    hub.requests.clear()
    assert "model.safetensors" in resolve(hub_env, "org/own-field")["files"]


def test_a_sharded_checkpoint_downloads_its_index_and_shards(hub, hub_env, checkpoint_dirs):
    from jaxattn.checkpoints import read_checkpoint

    got = resolve(hub_env, "org/sharded")
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert got["files"] == sorted(
        [*NEEDED[:1], *NEEDED[2:], "model.safetensors.index.json", *shards]
    )
    config, params = read_checkpoint(got["path"])
    _, want = read_checkpoint(checkpoint_dirs["bert"])
    _assert_same_tree(params, want)


def _assert_same_tree(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _assert_same_tree(a[key], b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key])
