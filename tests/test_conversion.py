"""Checkpoint conversion: total name mapping, file formats, orbax round trip.

Broken checkpoints are copies of the session's tiny checkpoints with one thing
changed (a weight added or removed, the model_type renamed); the loader must
refuse each with a CheckpointError (a ValueError) that names the culprit, or a
FileNotFoundError naming a missing file. tests/checkpoints/ damages files too.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import weakref

import jax
import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, make_checkpoint
from safetensors.numpy import load_file, save_file

import jaxattn
from jaxattn.checkpoints import convert_checkpoint
from jaxattn.checkpoints.loading import read_checkpoint
from jaxattn.errors import CheckpointError

LIGHT = ("attention", "scores", "hidden_states")
# One weight per family that every encoder needs (HF names).
NEEDED = {
    "bert": "encoder.layer.2.output.dense.bias",
    "roberta": "encoder.layer.1.attention.self.key.weight",
    "distilbert": "transformer.layer.1.ffn.lin1.weight",
}
TEXTS = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "", "unknown wörds: zebra-xylophone 42!"]


def _copy(src, tmp_path, name="ckpt"):
    return shutil.copytree(src, tmp_path / name)


def _edit_weights(path, edit) -> None:
    state = load_file(str(path / "model.safetensors"))
    edit(state)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})


def _assert_trees_equal(a, b) -> None:
    paths_a = jax.tree_util.tree_flatten_with_path(a)[0]
    paths_b = jax.tree_util.tree_flatten_with_path(b)[0]
    assert [p for p, _ in paths_a] == [p for p, _ in paths_b]
    for (path, x), (_, y) in zip(paths_a, paths_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, path
        np.testing.assert_array_equal(x, y, err_msg=str(path))


def test_unused_weight_raises_naming_it(checkpoint_dirs, tmp_path, family):
    path = _copy(checkpoint_dirs[family], tmp_path)
    extra = "encoder.layer.0.attention.self.rotary_freq"

    def add(state):
        state[extra] = np.ones((3,), np.float32)

    _edit_weights(path, add)
    with pytest.raises(CheckpointError, match=extra.replace(".", r"\.")):
        jaxattn.load(path)


def test_missing_weight_raises_naming_it(checkpoint_dirs, tmp_path, family):
    path = _copy(checkpoint_dirs[family], tmp_path)
    _edit_weights(path, lambda state: state.pop(NEEDED[family]))
    with pytest.raises(CheckpointError, match=NEEDED[family].replace(".", r"\.")):
        jaxattn.load(path)


def test_missing_weight_raises_in_convert_too(checkpoint_dirs, tmp_path):
    path = _copy(checkpoint_dirs["bert"], tmp_path)
    _edit_weights(path, lambda state: state.pop(NEEDED["bert"]))
    with pytest.raises(CheckpointError, match=NEEDED["bert"].replace(".", r"\.")):
        convert_checkpoint(path, tmp_path / "out")


def test_unknown_model_type_raises_naming_it(checkpoint_dirs, tmp_path):
    path = _copy(checkpoint_dirs["bert"], tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "gpt_neox"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="gpt_neox"):
        jaxattn.load(path)


def test_pytorch_model_bin_loads_equal_to_safetensors(checkpoint_dirs, tmp_path, family):
    binary = make_checkpoint(family, tmp_path / "bin", weights="bin")  # same seed
    assert (binary / "pytorch_model.bin").is_file()
    assert not (binary / "model.safetensors").exists()
    config_st, params_st = read_checkpoint(checkpoint_dirs[family])
    config_bin, params_bin = read_checkpoint(binary)
    # The name comes from the directory's name; everything else must agree.
    assert dataclasses.replace(config_bin, name=config_st.name) == config_st
    _assert_trees_equal(params_bin, params_st)


def test_round_trip_params_config_tokenizer(checkpoint_dirs, engines, tmp_path, family):
    out = convert_checkpoint(checkpoint_dirs[family], tmp_path / "converted")
    config_hf, params_hf = read_checkpoint(checkpoint_dirs[family])
    config_rt, params_rt = read_checkpoint(out)
    assert config_rt == config_hf
    _assert_trees_equal(params_rt, params_hf)
    # The converted dir carries the tokenizer: same word pieces and ids.
    source = engines[family]
    converted = jaxattn.load(out)
    assert converted.info == source.info
    assert converted.config == source.config
    for a, b in zip(converted.tokenize(TEXTS), source.tokenize(TEXTS), strict=True):
        assert (a.ids, a.type_ids, a.tokens, a.sentence_b_start) == (
            b.ids,
            b.type_ids,
            b.tokens,
            b.sentence_b_start,
        )


def test_round_trip_captures_bit_equal(checkpoint_dirs, engines, tmp_path):
    out = convert_checkpoint(checkpoint_dirs["bert"], tmp_path / "converted")
    converted = jaxattn.load(out)
    # The spec and shape of test_capture_invariants' float32 reference (one compile
    # per session for the source engine); params are compared in full above.
    (want,) = engines["bert"].capture([EXAMPLE_A], what=LIGHT)
    (got,) = converted.capture([EXAMPLE_A], what=LIGHT)
    assert got.tokens == want.tokens
    for name in LIGHT:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_converted_dir_is_self_contained(checkpoint_dirs, tmp_path):
    """The output holds config and tokenizer too: it loads after the HF dir is gone."""
    src = _copy(checkpoint_dirs["distilbert"], tmp_path, "src")
    out = convert_checkpoint(src, tmp_path / "converted")
    shutil.rmtree(src)
    engine = jaxattn.load(out)
    assert engine.info.family == "distilbert"
    assert engine.tokenize([EXAMPLE_A])[0].tokens[0] == "[CLS]"


@pytest.mark.parametrize(
    "remove, needle",
    [
        (("config.json",), "config.json"),
        (("model.safetensors",), "model.safetensors"),
        (("tokenizer.json", "vocab.txt", "tokenizer_config.json"), "tokenizer"),
    ],
)
def test_missing_file_raises_naming_it(checkpoint_dirs, tmp_path, remove, needle):
    path = _copy(checkpoint_dirs["bert"], tmp_path)
    for name in remove:
        (path / name).unlink()
    with pytest.raises(FileNotFoundError, match=needle.replace(".", r"\.")):
        jaxattn.load(path)


def test_unsupported_config_value_raises_naming_field(checkpoint_dirs, tmp_path):
    path = _copy(checkpoint_dirs["bert"], tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["position_embedding_type"] = "relative_key"  # changes the scores: must not pass
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="position_embedding_type"):
        jaxattn.load(path)


def test_vocab_txt_only_tokenizer(checkpoint_dirs, engines, tmp_path):
    """Older BERT checkpoints ship vocab.txt without tokenizer.json: same word pieces."""
    path = _copy(checkpoint_dirs["bert"], tmp_path)
    (path / "tokenizer.json").unlink()
    engine = jaxattn.load(path)
    for a, b in zip(engine.tokenize(TEXTS), engines["bert"].tokenize(TEXTS), strict=True):
        assert (a.ids, a.type_ids, a.tokens) == (b.ids, b.type_ids, b.tokens)


def test_masked_lm_checkpoint_has_the_same_encoder(checkpoint_dirs, torch_models, tmp_path, family):
    """A task checkpoint (base model under a prefix, plus an MLM head) maps to the same
    encoder params as the bare model it was built from."""
    import transformers

    name = {
        "bert": "BertForMaskedLM",
        "roberta": "RobertaForMaskedLM",
        "distilbert": "DistilBertForMaskedLM",
    }[family]
    base = torch_models[family]
    mlm = getattr(transformers, name)(base.config)
    state = {k: v for k, v in base.state_dict().items() if not k.startswith("pooler.")}
    mlm.base_model.load_state_dict(state)
    path = tmp_path / "mlm"
    mlm.save_pretrained(str(path))
    for f in checkpoint_dirs[family].iterdir():
        if f.name.startswith(("tokenizer", "vocab", "merges", "special")):
            shutil.copy(f, path / f.name)
    _, params_mlm = read_checkpoint(path)
    _, params_base = read_checkpoint(checkpoint_dirs[family])
    _assert_trees_equal(params_mlm["encoder"], params_base["encoder"])
    jaxattn.load(path)  # the MLM head's weights are all accounted for


def test_a_bfloat16_checkpoint_is_cast_one_tensor_at_a_time(checkpoint_dirs, monkeypatch):
    """The loader lets each read tensor go once cast to float32: the bfloat16 read and
    its float32 casts are never both held whole (1.5x the float32 weights)."""
    import ml_dtypes

    from jaxattn.checkpoints import hf_files, hf_weights

    path = checkpoint_dirs["bert"]
    _, want = read_checkpoint(path)
    read, sources, alive = hf_files.read_state_dict, [], []

    def read_bfloat16(p):
        state = {k: v.astype(ml_dtypes.bfloat16) for k, v in read(p).items()}
        sources.extend(weakref.ref(v) for v in state.values())
        return state

    def cast(value):  # how many of the read tensors are still held, at each cast
        alive.append(sum(r() is not None for r in sources))
        return np.asarray(value, np.float32)

    monkeypatch.setattr(hf_files, "read_state_dict", read_bfloat16)
    monkeypatch.setattr(hf_weights, "as_float32", cast)
    _, got = read_checkpoint(path)
    assert len(alive) > 10 and alive[0] == len(sources)
    assert alive == list(range(alive[0], alive[0] - len(alive), -1))  # one fewer each time
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=2**-8, atol=0), got, want)


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def _aligned(a: np.ndarray) -> bool:  # what jax's CPU client needs to take it without a copy
    return a.flags.c_contiguous and a.ctypes.data % 64 == 0


def test_loaded_params_are_contiguous_and_64_byte_aligned(checkpoint_dirs, tmp_path, family):
    """Each read params leaf (safetensors, pytorch_model.bin, a converted checkpoint) is
    C-contiguous and starts on a 64-byte boundary, transposed kernels included."""
    binary = make_checkpoint(family, tmp_path / "bin", weights="bin")
    native = convert_checkpoint(checkpoint_dirs[family], tmp_path / "converted")
    for path in (checkpoint_dirs[family], binary, native):
        leaves = _leaves(read_checkpoint(path)[1])
        assert len(leaves) > 10
        assert [_aligned(a) for a in leaves] == [True] * len(leaves), path


def test_where_jax_places_on_a_gpu_the_leaves_are_not_copied_to_align_them(monkeypatch):
    """A GPU/TPU's placement copies every weight anyway: aligning a leaf there would be a
    copy for nothing, added to the load's time (a transposed view stays a view)."""
    from jaxattn.engine import aligned

    kernel = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a view, not contiguous
    monkeypatch.setattr(aligned, "places_on_cpu", lambda: False)
    assert np.shares_memory(aligned.placeable(kernel), kernel)
    monkeypatch.setattr(aligned, "places_on_cpu", lambda: True)
    got = aligned.placeable(kernel)
    assert not np.shares_memory(got, kernel) and got.flags.c_contiguous
    assert got.ctypes.data % aligned.ALIGNMENT == 0
    np.testing.assert_array_equal(got, kernel)


def test_on_the_cpu_the_placed_weights_are_the_loaded_arrays(checkpoint_dirs):
    """Placed on the CPU, unrolled, each weight's device buffer is the read host array
    itself (no second copy while loading); scanned, each stacked weight is one aligned
    stack, placed without another copy."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from jaxattn.engine import layer_loop
    from jaxattn.engine.step import CaptureStep

    config, params = read_checkpoint(checkpoint_dirs["bert"])
    host = _leaves(params["encoder"])
    step = CaptureStep(config, params["encoder"], jax.devices(), layer_loop="unrolled")
    placed = jax.tree.leaves(step.params)
    assert len(placed) == len(host) > 10
    for p, a in zip(placed, host, strict=True):
        assert {s.data.unsafe_buffer_pointer() for s in p.addressable_shards} == {a.ctypes.data}
    stacks, replicated = [], NamedSharding(Mesh(np.asarray(jax.devices()), ("d",)), PartitionSpec())

    def put(a):
        stacks.append(a)
        return jax.device_put(a, replicated)

    stacked = layer_loop.stack_layers(params["encoder"], config, put=put)["layers"]
    assert len(stacks) == len(jax.tree.leaves(stacked)) > 5
    for p, a in zip(jax.tree.leaves(stacked), stacks, strict=True):
        assert _aligned(a) and a.shape[0] == config.num_layers
        assert {s.data.unsafe_buffer_pointer() for s in p.addressable_shards} == {a.ctypes.data}
    # The stacks hold the layers' weights, in order.
    for i in range(config.num_layers):
        jax.tree.map(
            lambda s, w, i=i: np.testing.assert_array_equal(np.asarray(s)[i], w),
            stacked,
            params["encoder"][f"layer_{i}"],
        )


def test_a_transposed_leaf_larger_than_a_tile_is_copied_whole(monkeypatch):
    """A transposed view is copied tile by tile: every tile of an odd-sized stacked kernel
    taller and wider than a tile arrives, the partial last ones too."""
    from jaxattn.engine import aligned

    monkeypatch.setattr(aligned, "places_on_cpu", lambda: True)
    rows, cols = aligned.TILE + 45, 2 * aligned.TILE + 5
    kernel = np.random.default_rng(0).standard_normal((3, cols, rows), np.float32)
    got = aligned.placeable(kernel.transpose(0, 2, 1))
    assert got.shape == (3, rows, cols) and _aligned(got)
    for i in range(3):  # element by element: the transpose, written out
        np.testing.assert_array_equal(got[i], [list(col) for col in zip(*kernel[i], strict=True)])


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16", np.int8])
def test_aligned_buffers_of_every_size(dtype):
    """Empty, 0-d, small (numpy's heap) and from `MAPPED` bytes on (a mapping of its own):
    each the shape and dtype asked for, C-contiguous, writable, and where it holds
    anything 64-byte aligned."""
    import ml_dtypes  # noqa: F401 (numpy knows "bfloat16" through it)

    from jaxattn.engine import aligned

    dtype = np.dtype(dtype)
    n = aligned.MAPPED // dtype.itemsize
    for shape in [(), (0,), (3, 0), (5,), (n - 1,), (n,), (7, n // 7 + 3)]:
        a = aligned.aligned_empty(shape, dtype)
        assert (a.shape, a.dtype, a.flags.c_contiguous, a.flags.writeable) == (
            shape,
            dtype,
            True,
            True,
        )
        assert a.size == 0 or a.ctypes.data % 64 == 0, shape
        a[...] = 3
        assert a.size == 0 or (a.astype(np.float32).min(), a.astype(np.float32).max()) == (3, 3)


def test_a_forked_child_writes_its_own_copy_of_an_aligned_buffer():
    """As with any numpy array, a forked child's write into a buffer (a mapping of its
    own) is its own: the parent's is unchanged (a shared mapping would change it)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import os\n"
        "from jaxattn.engine.aligned import MAPPED, aligned_empty\n"
        "a = aligned_empty((MAPPED,), 'u1'); a[:] = 1\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    a[:] = 2; os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(int(a.min()), int(a.max()))\n"
    )
    root = str(Path(jaxattn.__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns `a`'s memory (the last numpy array along its bases)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def test_the_placed_weights_outlive_every_host_reference(checkpoint_dirs, monkeypatch):
    """The CPU's placement shares the loaded arrays' memory (each leaf a mapping of its
    own here): with every host reference gone and collected, and that memory's size
    allocated and written again, the placed weights are still the checkpoint's."""
    import gc

    from jaxattn.engine import aligned
    from jaxattn.engine.step import CaptureStep

    want = _leaves(read_checkpoint(checkpoint_dirs["bert"])[1]["encoder"])
    monkeypatch.setattr(aligned, "MAPPED", 1)  # every leaf mapped: a freed one would fault
    config, params = read_checkpoint(checkpoint_dirs["bert"])
    host = [weakref.ref(_owner(a)) for a in _leaves(params["encoder"])]
    step = CaptureStep(config, params["encoder"], jax.devices(), layer_loop="unrolled")
    pointers = [
        p.addressable_shards[0].data.unsafe_buffer_pointer() for p in jax.tree.leaves(step.params)
    ]
    assert pointers == [a.ctypes.data for a in _leaves(params["encoder"])]  # shared, not copied
    del params
    gc.collect()
    assert all(r() is not None for r in host)  # jax keeps their memory alive
    junk = [np.full(a.shape, -7, a.dtype) for a in want]
    got = [np.asarray(p) for p in jax.tree.leaves(step.params)]
    assert len(got) == len(want) > 10 and len(junk) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def _mappings_of(monkeypatch) -> list[list[str]]:
    """The tensors read through each opening of a safetensors file (`safe_open`), in order."""
    import safetensors

    opened, real = [], safetensors.safe_open

    class Counted:
        def __init__(self, *args, **kwargs):
            self._file, self.names = real(*args, **kwargs), []
            opened.append(self.names)

        def __enter__(self):
            self._file.__enter__()
            return self

        def __exit__(self, *exc):
            return self._file.__exit__(*exc)

        def keys(self):
            return self._file.keys()

        def get_tensor(self, name):
            self.names.append(name)
            return self._file.get_tensor(name)

    monkeypatch.setattr(safetensors, "safe_open", Counted)
    return opened


def test_a_file_of_many_tensors_is_not_opened_once_per_tensor(tmp_path, monkeypatch):
    """Every opening of a safetensors file reads its whole header: opened once per tensor,
    a file of n tensors costs n^2 (a 3000-tensor file took 12.5 s to read, one opening
    47 ms). A few bytes' worth of tensors (zero-size, float16 and bfloat16 ones among
    them) are read through one opening, each as it was written."""
    import ml_dtypes

    from jaxattn.checkpoints import hf_files

    rng = np.random.default_rng(0)
    dtypes = (np.float32, np.float16, ml_dtypes.bfloat16)
    written = {f"h.{i}.w": rng.normal(size=(i % 4, 3)).astype(dtypes[i % 3]) for i in range(400)}
    save_file(written, str(tmp_path / "model.safetensors"))
    opened = _mappings_of(monkeypatch)
    read = hf_files._read_safetensors([tmp_path / "model.safetensors"])
    assert len(opened) == 1 and sorted(opened[0]) == sorted(written)
    assert read.keys() == written.keys()
    for name, tensor in written.items():
        assert read[name].dtype == tensor.dtype and read[name].shape == tensor.shape
        np.testing.assert_array_equal(read[name], tensor)


def test_a_large_file_is_mapped_again_every_so_many_bytes(tmp_path, monkeypatch):
    """The file's pages a mapping touched count in the process's RSS until it is closed:
    it is mapped again once `MAPPED_BYTES` were copied out of it, not held for the whole
    file (twice the weights at its close). Two shards: each read through its own."""
    from jaxattn.checkpoints import hf_files

    first = {f"a.{i}": np.full((3, 4), i, np.float32) for i in range(10)}  # 48 bytes each
    second = {f"b.{i}": np.full(5, i, np.float32) for i in range(4)}  # 20 bytes each
    save_file(first, str(tmp_path / "one.safetensors"))
    save_file(second, str(tmp_path / "two.safetensors"))
    monkeypatch.setattr(hf_files, "MAPPED_BYTES", 100)  # past it after 3 of 48 or 5 of 20
    opened = _mappings_of(monkeypatch)
    read = hf_files._read_safetensors([tmp_path / "one.safetensors", tmp_path / "two.safetensors"])
    assert [len(names) for names in opened] == [3, 3, 3, 1, 4]
    assert sorted(sum(opened[:4], [])) == sorted(first) and sorted(opened[4]) == sorted(second)
    assert {k: v.tolist() for k, v in read.items()} == {
        k: v.tolist() for k, v in (first | second).items()
    }
