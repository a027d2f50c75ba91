"""Every bad model directory gets one clear error naming the file or tensor, never a
library's traceback: damaged weights, a broken config.json, a config that does not
belong to the weights, missing or broken files, a damaged jaxattn (orbax) checkpoint.

Each test damages a copy of the session's tiny BERT checkpoint (D=15, 3 layers x 3
heads, intermediate 37, max positions 67) in one way and asserts the exception's
class and that its message names the culprit.
"""

from __future__ import annotations

import errno
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import jaxattn
from jaxattn.checkpoints.loading import read_checkpoint
from jaxattn.errors import CheckpointError

QUERY = "encoder.layer.0.attention.self.query.weight"


def _named(*parts) -> str:
    """A regex matching the parts in order, each literally."""
    return ".*".join(re.escape(str(p)) for p in parts)


def _cut(data: bytes, how: str) -> bytes:
    return {"truncated": data[: len(data) // 2], "garbage": b"\x8f\x00junk" * 97, "empty": b""}[how]


@pytest.mark.parametrize(
    "how, says",
    [
        ("truncated", "is not a readable safetensors file (truncated or corrupt?): Error while"),
        ("garbage", "is not a readable safetensors file (truncated or corrupt?): Error while"),
        ("empty", "is empty (0 bytes)"),
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_damaged_safetensors_is_named(bert_copy, how, says):
    file = bert_copy / "model.safetensors"
    file.write_bytes(_cut(file.read_bytes(), how))
    with pytest.raises(CheckpointError, match=_named(file, says)):
        jaxattn.load(bert_copy)


@pytest.mark.parametrize(
    "how, says",
    [
        ("truncated", "is not a readable PyTorch weights file (truncated or corrupt?)"),
        ("garbage", "is not a readable PyTorch weights file (truncated or corrupt?)"),
        ("empty", "is empty (0 bytes)"),
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_damaged_pytorch_bin_is_named(bert_copy, how, says):
    import torch

    state = load_file(str(bert_copy / "model.safetensors"))
    (bert_copy / "model.safetensors").unlink()
    file = bert_copy / "pytorch_model.bin"
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, file)
    file.write_bytes(_cut(file.read_bytes(), how))
    with pytest.raises(CheckpointError, match=_named(file, says)):
        jaxattn.load(bert_copy)


def test_pytorch_bin_of_other_objects_is_named(bert_copy):
    import collections

    import torch

    (bert_copy / "model.safetensors").unlink()
    file = bert_copy / "pytorch_model.bin"
    torch.save(
        {"embeddings.word_embeddings.weight": torch.ones(2), "step": collections.Counter()}, file
    )
    with pytest.raises(CheckpointError, match=_named(file, "'step' is a Counter, not a tensor")):
        jaxattn.load(bert_copy)


def test_bfloat16_safetensors_load_as_their_float32_values(bert_copy, checkpoint_dirs):
    """Real checkpoints ship bf16: they load (numpy alone cannot read bf16)."""
    import torch
    from safetensors.torch import save_file as save_torch

    state = load_file(str(bert_copy / "model.safetensors"))
    bf16 = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in state.items()}
    save_torch(bf16, str(bert_copy / "model.safetensors"))
    _, params = read_checkpoint(bert_copy)
    want = bf16[QUERY].float().numpy().T.reshape(15, 3, 5)  # [H*K, D] -> [D, H, K]
    got = params["encoder"]["layer_0"]["attention"]["query"]["kernel"]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32


def test_bad_shard_index_is_named(bert_copy):
    (bert_copy / "model.safetensors").rename(bert_copy / "shard-1.safetensors")
    index = bert_copy / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": "shard-1.safetensors", "b": "shard-2.safetensors"}}')
    with pytest.raises(FileNotFoundError, match=_named("shard-2.safetensors", index.name)):
        jaxattn.load(bert_copy)
    index.write_text('{"metadata": {}}')
    with pytest.raises(CheckpointError, match=_named(index, "weight_map")):
        jaxattn.load(bert_copy)


def test_config_not_json_names_file_line_and_column(bert_copy):
    file = bert_copy / "config.json"
    file.write_text('{\n  "model_type": "bert"\n  "hidden_size": 15\n}\n')
    with pytest.raises(CheckpointError) as info:
        jaxattn.load(bert_copy)
    assert str(info.value) == (
        f"{file} is not valid JSON (line 3, column 3: Expecting ',' delimiter)"
    )


def test_config_not_an_object(bert_copy):
    (bert_copy / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=_named(bert_copy / "config.json", "a list")):
        jaxattn.load(bert_copy)


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "vocab_size"])
def test_config_missing_size_names_field_and_file(bert_copy, edit_config, field):
    edit_config(bert_copy, **{field: None})
    with pytest.raises(CheckpointError, match=_named(bert_copy / "config.json", "lacks", field)):
        jaxattn.load(bert_copy)


@pytest.mark.parametrize(
    "field, value, kind",
    [
        ("hidden_size", "15", '"15" (a string)'),
        ("num_hidden_layers", True, "true (true/false)"),
        ("vocab_size", [159], "[159] (a list)"),
        ("intermediate_size", 37.5, "37.5 (a number)"),
        ("hidden_act", 3, "3 (a number)"),
    ],
)
def test_config_wrong_type_names_field_value_and_file(bert_copy, edit_config, field, value, kind):
    edit_config(bert_copy, **{field: value})
    with pytest.raises(CheckpointError, match=_named(bert_copy / "config.json", field, kind)):
        read_checkpoint(bert_copy)


def test_config_whole_float_is_a_whole_number(bert_copy, edit_config):
    edit_config(bert_copy, hidden_size=15.0)
    config, _ = read_checkpoint(bert_copy)
    assert config.hidden_size == 15 and isinstance(config.hidden_size, int)


@pytest.mark.parametrize("model_type", ["gpt_neox", None])
def test_model_type_unknown_or_absent_is_named(bert_copy, edit_config, model_type):
    edit_config(bert_copy, model_type=model_type)
    with pytest.raises(CheckpointError, match=_named(bert_copy / "config.json", "model_type")):
        jaxattn.load(bert_copy)


def test_unknown_config_field_is_named_with_both_ways_to_vouch_for_it(bert_copy, edit_config):
    edit_config(bert_copy, rotary_base=10000)
    with pytest.raises(CheckpointError) as info:
        jaxattn.load(bert_copy)
    assert str(info.value).startswith(f"{bert_copy / 'config.json'}: field 'rotary_base' of")
    assert "ignore_config_fields=('rotary_base',)" in str(info.value)
    assert "--ignore-config-field rotary_base" in str(info.value)
    jaxattn.load(bert_copy, ignore_config_fields=("rotary_base",))


def test_heads_that_do_not_divide_the_hidden_size(bert_copy, edit_config):
    edit_config(bert_copy, num_attention_heads=4)
    with pytest.raises(
        CheckpointError, match=_named("hidden_size=15 is not divisible by num_attention_heads=4")
    ):
        jaxattn.load(bert_copy)


@pytest.mark.parametrize(
    "field, value, tensor, have, want, said",
    [
        (
            "hidden_size",
            18,
            "embeddings.word_embeddings.weight",
            "(159, 15)",
            "(159, 18)",
            "vocab_size=159, hidden_size=18",
        ),
        (
            "vocab_size",
            160,
            "embeddings.word_embeddings.weight",
            "(159, 15)",
            "(160, 15)",
            "vocab_size=160, hidden_size=15",
        ),
        (
            "intermediate_size",
            38,
            "encoder.layer.0.intermediate.dense.weight",
            "(37, 15)",
            "(38, 15)",
            "intermediate_size=38, hidden_size=15",
        ),
        (
            "max_position_embeddings",
            70,
            "embeddings.position_embeddings.weight",
            "(67, 15)",
            "(70, 15)",
            "max_position_embeddings=70, hidden_size=15",
        ),
    ],
)
def test_config_contradicting_the_weights_names_tensor_and_shapes(
    bert_copy, edit_config, field, value, tensor, have, want, said
):
    edit_config(bert_copy, **{field: value})
    config = bert_copy / "config.json"
    with pytest.raises(CheckpointError) as info:
        jaxattn.load(bert_copy)
    assert (
        str(info.value) == f"weight {tensor} has shape {have} but {config} ({said}) implies {want}"
    )


def test_one_misshapen_weight_is_named_before_any_reshape(bert_copy):
    file = bert_copy / "model.safetensors"
    state = load_file(str(file))
    state[QUERY] = np.zeros((16, 15), np.float32)  # (H*K, D) would be (15, 15)
    save_file(state, str(file))
    with pytest.raises(
        CheckpointError, match=_named(QUERY, "(16, 15)", "hidden_size=15", "(15, 15)")
    ):
        jaxattn.load(bert_copy)


def test_more_layers_in_config_name_one_missing_tensor_and_count(bert_copy, edit_config):
    per_layer = sum(
        k.startswith("encoder.layer.0.") for k in load_file(str(bert_copy / "model.safetensors"))
    )
    edit_config(bert_copy, num_hidden_layers=4)
    with pytest.raises(
        CheckpointError,
        match=_named("encoder.layer.3.", f"and {per_layer - 1} more tensor(s)", "config.json"),
    ):
        jaxattn.load(bert_copy)


def test_fewer_layers_in_config_says_so(bert_copy, edit_config):
    edit_config(bert_copy, num_hidden_layers=2)
    with pytest.raises(
        CheckpointError, match=_named("encoder.layer.2.", "num_hidden_layers=2", "more layers")
    ):
        jaxattn.load(bert_copy)


def test_model_path_missing_or_a_file(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=_named(missing, "does not exist")):
        jaxattn.load(missing)
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=_named(file, "not a directory")):
        jaxattn.load(file)


def test_directory_without_weights_names_the_files_looked_for(bert_copy):
    (bert_copy / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=_named(
            bert_copy, "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
        ),
    ):
        jaxattn.load(bert_copy)


def test_empty_directory_names_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match=_named(tmp_path, "config.json")):
        jaxattn.load(tmp_path)


def test_broken_tokenizer_json_is_named(bert_copy):
    file = bert_copy / "tokenizer.json"
    file.write_text(file.read_text()[:300])
    with pytest.raises(CheckpointError, match=_named(file, "is not valid JSON (line")):
        jaxattn.load(bert_copy)
    file.write_text('{"version": "1.0"}')  # JSON, but not a tokenizer
    with pytest.raises(
        CheckpointError, match=_named("tokenizer files of", bert_copy, "tokenizer.json")
    ):
        jaxattn.load(bert_copy)


def test_damaged_native_checkpoint_is_named(native_dir, tmp_path):
    bad = shutil.copytree(native_dir, tmp_path / "native")
    for f in (bad / "params").rglob("*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=_named(bad / "params", "not a readable orbax")):
        jaxattn.load(bad)
    shutil.rmtree(bad / "params")
    with pytest.raises(CheckpointError, match=_named(bad, "no params/ directory")):
        jaxattn.load(bad)
    (bad / "jaxattn.json").write_text('{"format": "jaxattn",')
    with pytest.raises(CheckpointError, match=_named(bad / "jaxattn.json", "not valid JSON")):
        jaxattn.load(bad)


# Out of memory while loading: the host's (a MemoryError; an OSError ENOMEM from a
# large aligned buffer's mapping) and a device's (XLA's RESOURCE_EXHAUSTED while the
# weights are placed): one error naming the model and its files' size, never a
# library's exception or the capture-time advice (--limit).


def test_host_out_of_memory_reading_is_named(bert_copy, monkeypatch):
    from jaxattn.checkpoints import hf_files
    from jaxattn.errors import HostMemoryError

    def full(*_, **__):
        raise MemoryError

    monkeypatch.setattr(hf_files, "read_state_dict", full)
    with pytest.raises(HostMemoryError, match=_named("out of host memory loading", bert_copy)):
        jaxattn.load(bert_copy)


def test_unmappable_buffer_is_host_out_of_memory(bert_copy, monkeypatch):
    """Every leaf is mapped (aligned.MAPPED lowered to 1 byte) and no mapping can be made:
    the OSError ENOMEM placing the weights on the CPU becomes a HostMemoryError (a
    MemoryError too) that says the files' size (the tiny checkpoint's: kB)."""
    import errno
    import mmap

    from jaxattn.engine import aligned
    from jaxattn.errors import HostMemoryError

    def refuse(*_, **__):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(aligned, "MAPPED", 1)
    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(HostMemoryError, match=r"its checkpoint's files: [\d.]+ kB") as got:
        jaxattn.load(bert_copy)
    assert isinstance(got.value, MemoryError)
    assert isinstance(got.value.__cause__, OSError)


def test_other_os_errors_are_not_memory(bert_copy, monkeypatch):
    """An OSError that is no want of memory (EIO) is raised as it was."""
    import errno

    from jaxattn.checkpoints import hf_files

    def broken(*_, **__):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(hf_files, "read_state_dict", broken)

    def walked(*_):  # the checkpoint's size is looked up for a want of memory only
        raise AssertionError("the model directory was walked for an error that is not memory")

    monkeypatch.setattr(type(bert_copy), "rglob", walked)
    with pytest.raises(OSError, match="Input/output error") as got:
        jaxattn.load(bert_copy)
    assert not isinstance(got.value, MemoryError)


def _placing_fails(monkeypatch, message: str) -> None:
    """XLA fails with `message` placing the params tree (the engine's other puts pass)."""
    import jax

    from jaxattn.engine import step

    real = jax.device_put

    def full(x, *a, **k):
        if isinstance(x, dict):
            raise jax.errors.JaxRuntimeError(message)
        return real(x, *a, **k)

    monkeypatch.setattr(step.jax, "device_put", full)


def test_device_out_of_memory_placing_is_named(bert_copy, monkeypatch):
    from jaxattn.errors import DeviceMemoryError

    _placing_fails(
        monkeypatch,
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB.\nits second line",
    )
    with pytest.raises(DeviceMemoryError) as got:
        jaxattn.load(bert_copy, layer_loop="unrolled")
    message = str(got.value)
    assert str(bert_copy) in message and "do not fit the device's memory" in message
    assert (
        "Out of memory while trying to allocate 4.00GiB." in message
        and "second line" not in message
    )


def test_cli_out_of_memory_loading_is_one_line(bert_copy, monkeypatch, capsys):
    from jaxattn.checkpoints import hf_files
    from jaxattn.cli import main

    def full(*_, **__):
        raise MemoryError

    monkeypatch.setattr(hf_files, "read_state_dict", full)
    assert main(["capture", "--model", str(bert_copy), "a text"]) == 1
    err = capsys.readouterr().err.strip()
    assert "out of host memory loading" in err and "--limit" not in err
    assert "\n" not in err and "Traceback" not in err


def test_pinned_host_pool_out_of_memory_placing_is_host_memory(bert_copy, monkeypatch):
    """XLA's pinned host pool (xla_gpu_host_bfc) running out while the weights are placed
    is the host's memory, as the engine reads it at capture (`oom.pool_exhausted`): a
    HostMemoryError naming the pool's variable, not "do not fit the device's memory"."""
    from jaxattn.errors import HostMemoryError

    _placing_fails(
        monkeypatch,
        "RESOURCE_EXHAUSTED: Out of host memory trying to allocate 1.00GiB "
        "with allocator xla_gpu_host_bfc",
    )
    with pytest.raises(HostMemoryError) as got:
        jaxattn.load(bert_copy, layer_loop="unrolled")
    message = str(got.value)
    assert "pinned host memory pool" in message and str(bert_copy) in message
    assert "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB" in message
    assert "device's memory" not in message


def test_host_out_of_memory_reading_the_tokenizer_names_the_tokenizer(bert_copy, monkeypatch):
    """A MemoryError reading the tokenizer (the weights read by then) names the tokenizer,
    not the weights and their size."""
    from jaxattn.checkpoints import loading
    from jaxattn.errors import HostMemoryError

    def full(*_, **__):
        raise MemoryError

    monkeypatch.setattr(loading, "read_tokenizer", full)
    with pytest.raises(HostMemoryError, match=_named("out of host memory reading", bert_copy)):
        jaxattn.load(bert_copy)
    with pytest.raises(HostMemoryError) as got:
        jaxattn.load(bert_copy)
    assert "tokenizer" in str(got.value) and "weights" not in str(got.value)


@pytest.mark.parametrize(
    "error",
    [MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory")],
    ids=["MemoryError", "ENOMEM"],
)
@pytest.mark.parametrize("kind", ["native", "safetensors", "bin"])
def test_out_of_memory_inside_a_reader_is_not_a_damaged_file(
    kind, error, native_dir, bert_copy, monkeypatch
):
    """Each weights reader turns its library's errors into CheckpointError ("damaged or
    incomplete?", "truncated or corrupt?"): the host's want of memory inside orbax,
    safetensors or torch was one of them, the advice to convert or download again.
    (The tokenizer's backends' stays one: a damaged file's sizes are what make those
    allocate, `read_tokenizer`.)"""
    import torch

    from jaxattn.checkpoints import hf_files
    from jaxattn.errors import HostMemoryError

    def full(*_, **__):
        raise error

    path = bert_copy
    if kind == "native":
        import orbax.checkpoint as ocp

        path = native_dir
        monkeypatch.setattr(ocp.PyTreeCheckpointer, "restore", full)
    elif kind == "safetensors":
        monkeypatch.setattr("safetensors.safe_open", full)
    else:
        state = load_file(bert_copy / "model.safetensors")
        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path / "pytorch_model.bin")
        (path / "model.safetensors").unlink()
        monkeypatch.setattr(torch, "load", full)
    assert hf_files.out_of_host_memory(error)
    with pytest.raises(HostMemoryError, match=_named("out of host memory loading", path)):
        jaxattn.load(path)
