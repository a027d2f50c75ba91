"""The program cache: a capture's programs kept on disk as JAX exports them, so that a new
engine (a new process) runs them without tracing the model again."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest
from compile_events import traces
from hf_fixtures import make_checkpoint

import jaxattn
from jaxattn.engine import program_cache
from jaxattn.engine.kv_cache import Shape

WHAT = ("attention", "fx_norm", "sum_alpha_fx_norm")
# A layer-norm epsilon no other test's model has: programs of this file's own.
EPS = 3.25e-6
# Two lengths far apart: two programs (two length buckets).
TEXTS = ["the cat sat .", "a much longer sentence about the store and the cat " * 3]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint("bert", tmp_path_factory.mktemp("bert"), layer_norm_eps=EPS)


@pytest.fixture
def programs(tmp_path, monkeypatch):
    """The program cache on, in a directory of this test's own."""
    root = tmp_path / "programs"
    monkeypatch.setenv(program_cache.ENV, str(root))
    return root


def _files(root) -> set[str]:
    return {p.name for p in root.glob(f"*{program_cache.SUFFIX}")} if root.exists() else set()


def _capture(engine, what=WHAT, **options) -> list[dict]:
    caps = engine.capture(TEXTS, what=what, **options)
    return [{name: getattr(c, name) for name in what} for c in caps]


def _assert_equal(a: list[dict], b: list[dict]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def test_a_second_engine_runs_the_kept_programs_without_tracing(checkpoint, programs, monkeypatch):
    first = jaxattn.load(checkpoint)
    kept = _capture(first)
    assert first.step.program_cache.saved == 2 and len(_files(programs)) == 2

    second = jaxattn.load(checkpoint)
    with traces() as traced:
        loaded = _capture(second)
    assert traced == []
    assert (second.step.program_cache.loaded, second.step.program_cache.saved) == (2, 0)
    _assert_equal(loaded, kept)

    # and what the loaded programs compute is what a model traced now computes
    monkeypatch.setenv(program_cache.ENV, "off")
    fresh = jaxattn.load(checkpoint)
    assert fresh.step.program_cache is None
    with traces() as traced:
        _assert_equal(_capture(fresh), loaded)
    assert len(traced) == 2
    assert len(_files(programs)) == 2  # off: nothing written


def test_what_shapes_a_program_is_in_its_key(checkpoint, programs, tmp_path, monkeypatch):
    engine = jaxattn.load(checkpoint)
    _capture(engine, layers=(0, 1))
    before = _files(programs)
    assert len(before) == 2
    # another output dtype, another precision, other heads: other programs
    for options in ({"dtype": "uint8"}, {"precision": "bf16"}, {"heads": (0, 2)}):
        again = jaxattn.load(checkpoint)
        _capture(again, layers=(0, 1), **options)
        assert again.step.program_cache.loaded == 0, options
        assert len(_files(programs)) == len(before) + 2, options
        before = _files(programs)

    # a model of the same shapes whose config differs (the activation): a miss, and its
    # own numbers, those of the model traced with the cache off
    relu = make_checkpoint("bert", tmp_path / "relu", hidden_act="relu", layer_norm_eps=EPS)
    relu_engine = jaxattn.load(relu)
    got = _capture(relu_engine, layers=(0, 1))
    assert relu_engine.step.program_cache.loaded == 0
    monkeypatch.setenv(program_cache.ENV, "off")
    _assert_equal(got, _capture(jaxattn.load(relu), layers=(0, 1)))
    gelu = _capture(jaxattn.load(checkpoint), layers=(0, 1))
    assert not np.array_equal(got[1]["attention"], gelu[1]["attention"])

    # another jaxattn source: every program a miss
    monkeypatch.setenv(program_cache.ENV, str(programs))
    monkeypatch.setattr(program_cache, "_installed", lambda: "another jaxattn source")
    edited = jaxattn.load(checkpoint)
    with traces() as traced:
        _capture(edited, layers=(0, 1))
    assert edited.step.program_cache.loaded == 0 and len(traced) == 2
    assert edited.step.program_cache.saved == 2


def test_how_the_engine_runs_a_program_is_in_its_key(checkpoint, programs):
    """Engine options that change the program of one request and batch shape: each a
    miss after the default engine's (a hit would run the default's program, blockwise
    or scanned where the other was asked for), then its own programs loaded."""
    what = ("attention",)
    _capture(jaxattn.load(checkpoint), what=what, layers=0)
    # (scanned, the weights are stacked: their signature differs too)
    options = ({"attention": "blockwise"}, {"layer_loop": "scan"})
    for option in options:
        for expected in (0, 2):
            engine = jaxattn.load(checkpoint, **option)
            _capture(engine, what=what, layers=0)
            assert engine.step.program_cache.loaded == expected, option
    # weights of other dtypes, the same shapes
    weights = {"w": np.zeros((2, 3), np.float32)}
    other = {"w": np.zeros((2, 3), jax.numpy.bfloat16)}
    assert program_cache.signature(weights) != program_cache.signature(other)


def _replaced(checkpoint, programs, caplog, damage, warned: str, loaded: int) -> None:
    """Keep a capture's two programs and `damage` them (their paths, shorter first): the
    next engine's capture gives the kept numbers, `loaded` of the two loaded before one
    `warned` for each, both kept anew; a third engine loads them."""
    kept = _capture(jaxattn.load(checkpoint), layers=0)
    paths = sorted(programs.glob(f"*{program_cache.SUFFIX}"), key=lambda p: p.stat().st_size)
    assert len(paths) == 2
    damage(paths)
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        _assert_equal(_capture(engine, layers=0), kept)
    assert (engine.step.program_cache.loaded, engine.step.program_cache.saved) == (loaded, 2)
    assert sum(warned in r.getMessage() for r in caplog.records) == 2
    third = jaxattn.load(checkpoint)
    _assert_equal(_capture(third, layers=0), kept)
    assert third.step.program_cache.loaded == 2


def test_a_damaged_program_is_compiled_again(checkpoint, programs, caplog):
    def overwrite(paths):
        for path in paths:
            path.write_bytes(b"not a program")

    _replaced(checkpoint, programs, caplog, overwrite, "did not load", loaded=0)


def test_a_changed_byte_in_a_kept_program_is_never_run(checkpoint, programs, caplog):
    """The serialized program has no check of its own: a byte of a constant changed (the
    layer norms' epsilon, EPS, kept as float32 bytes) loaded and compiled, and ran other
    numbers. The file's digest makes it a miss: traced again, replaced."""

    def change_epsilon(paths):
        eps = np.float32(EPS).tobytes()
        for path in paths:
            data = bytearray(path.read_bytes())
            at = data.find(eps)
            assert at >= 0, "no epsilon in the program"
            data[at + 3] ^= 0x40  # the exponent's top bit: 3.25e-6 -> ~1e33
            path.write_bytes(bytes(data))

    _replaced(checkpoint, programs, caplog, change_epsilon, "does not match its sha256", 0)


def test_a_kept_program_that_does_not_compile_is_traced_again(checkpoint, programs, caplog):
    """A whole file of another program (the other length's, under this one's key): it
    loads, then does not fit the arguments. Removed, traced again, kept anew."""

    def swap(paths):
        short, long = paths
        short_bytes = short.read_bytes()
        short.write_bytes(long.read_bytes())
        long.write_bytes(short_bytes)

    _replaced(checkpoint, programs, caplog, swap, "did not load", loaded=2)


def test_a_kept_program_out_of_device_memory_stays_kept(checkpoint, programs, monkeypatch, caplog):
    """Out of device memory compiling a loaded program is the batch's size, not the file's
    fault: the error goes on to the engine (which runs smaller batches), the file stays."""
    one = dict(what=("attention",), layers=0)  # one text: no smaller batch to try
    jaxattn.load(checkpoint).capture(TEXTS[:1], **one)
    before = _files(programs)

    def exhausted(self, exported, args):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory compiling")

    monkeypatch.setattr(program_cache.Program, "compile_exported", exhausted)
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        with pytest.raises(Exception, match="Out of memory compiling"):
            engine.capture(TEXTS[:1], **one)
    assert not any("did not load" in r.getMessage() for r in caplog.records)
    assert _files(programs) == before


def test_programs_are_exported_for_the_engines_devices(checkpoint, programs, monkeypatch):
    """An engine on another backend's devices than the default one (the CPU's on a GPU
    machine, as gpu_checks' sanity-families runs them): its programs are exported for
    its own platform. Exported for the default backend's, they failed to run."""
    from jax._src.export import _export

    monkeypatch.setattr(_export, "default_export_platform", lambda: "tpu")  # not the CPU
    engine = jaxattn.load(checkpoint)
    got = _capture(engine, what=("attention",), layers=0)
    assert engine.step.program_cache.saved == 2
    monkeypatch.setenv(program_cache.ENV, "off")
    _assert_equal(got, _capture(jaxattn.load(checkpoint), what=("attention",), layers=0))


def test_an_exported_program_that_does_not_compile_runs_as_traced(
    checkpoint, programs, monkeypatch, caplog
):
    """Exported, then refused by the compiler (here: exported for another platform): the
    capture runs the model as traced, warned once a program, and nothing is kept."""
    monkeypatch.setattr(program_cache, "platform_of", lambda device: "tpu")
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        got = _capture(engine, what=("attention",), layers=0)
    assert engine.step.program_cache.saved == 0 and _files(programs) == set()
    assert sum("cannot keep" in r.getMessage() for r in caplog.records) == 2
    monkeypatch.setenv(program_cache.ENV, "off")
    _assert_equal(got, _capture(jaxattn.load(checkpoint), what=("attention",), layers=0))


def test_an_error_of_the_model_is_no_export_warning(checkpoint, programs, monkeypatch, caplog):
    """A program whose tracing fails (the model's own error) raises that error, without a
    warning that the program cache cannot keep it."""
    from jaxattn.engine import step

    def broken(*args):
        raise NotImplementedError("a branch the engine lacks")

    monkeypatch.setattr(step, "_quantized", broken)
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        with pytest.raises(NotImplementedError, match="^a branch the engine lacks"):
            _capture(engine, layers=0)
    assert [r.getMessage() for r in caplog.records] == []
    assert _files(programs) == set()


def test_ablated_heads_and_selected_positions_run_kept_programs(checkpoint, programs, monkeypatch):
    """Head ablation (its gates are arguments) and the maps' selected positions go through
    the program cache too: a second engine loads their programs and gets the numbers of a
    model traced with the cache off."""
    ablation = jaxattn.HeadAblation.of([(0, 1)], "uniform")
    options = [
        dict(layers=(0, 1), ablation=ablation),
        dict(layers=1, query_positions=[0, -1], key_positions=[1, 2]),
    ]
    for made in (jaxattn.load(checkpoint), jaxattn.load(checkpoint)):
        got = [_capture(made, **o) for o in options]
    assert made.step.program_cache.loaded == 4
    monkeypatch.setenv(program_cache.ENV, "off")
    for o, loaded in zip(options, got, strict=True):
        _assert_equal(loaded, _capture(jaxattn.load(checkpoint), **o))


def test_a_directory_that_cannot_be_written_is_no_error(checkpoint, tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(program_cache.ENV, str(blocked / "programs"))
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        got = _capture(engine, what=("attention", "fx_norm"), layers=2)
    assert engine.step.program_cache.saved == 0
    # two programs (two lengths), one warning: the second is not tried
    warned = [r for r in caplog.records if "could not keep a program" in r.getMessage()]
    assert len(warned) == 1
    assert got[0]["attention"].shape[-1] == got[0]["attention"].shape[-2]
    assert list(tmp_path.glob("**/*.tmp")) == []


def test_off_values_and_a_remote_compilation_cache_turn_it_off(monkeypatch):
    for off in ("off", "0", "false", "no", "OFF"):
        monkeypatch.setenv(program_cache.ENV, off)
        assert program_cache.directory() is None
    monkeypatch.delenv(program_cache.ENV)
    assert program_cache.directory("gs://bucket/xla") is None
    assert str(program_cache.directory("/tmp/xla")) == "/tmp/xla/" + program_cache.SUBDIRECTORY
    monkeypatch.setenv(program_cache.ENV, "/elsewhere")
    assert str(program_cache.directory("/tmp/xla")) == "/elsewhere"


def test_the_least_recently_used_programs_go_past_the_limit(tmp_path):
    for i, size in enumerate((300, 200, 100, 50)):
        path = tmp_path / f"p{i}{program_cache.SUFFIX}"
        path.write_bytes(b"x" * size)
        os.utime(path, (1000 + i, 1000 + i))  # p0 the least recently used
    (tmp_path / "other.txt").write_bytes(b"x" * 10_000)  # not a program: left alone
    program_cache._trim(tmp_path, 400)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.txt",
        f"p1{program_cache.SUFFIX}",
        f"p2{program_cache.SUFFIX}",
        f"p3{program_cache.SUFFIX}",
    ]
    program_cache._trim(tmp_path, 0)
    assert [p.name for p in tmp_path.iterdir()] == ["other.txt"]
    # a write a killed process left, an hour and more ago, goes; one under way stays
    for name, age in (("left.tmp", program_cache.STALE_SECONDS + 60), ("writing.tmp", 5)):
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (time.time() - age,) * 2)
    program_cache._trim(tmp_path, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt", "writing.tmp"]


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    class Exported:
        def serialize(self):
            return b"a program"

    monkeypatch.setattr(program_cache.os, "replace", interrupted)
    cache = program_cache.ProgramCache(tmp_path, "a step", jax.devices()[:1])
    with pytest.raises(KeyboardInterrupt):
        cache.save(cache.key("a call"), Exported())
    assert list(tmp_path.iterdir()) == []


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jaxattn
    traced = []
    def listen(event, seconds, fun_name=None, **_):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(str(fun_name))
    jax.monitoring.register_event_duration_secs_listener(listen)
    engine = jaxattn.load(sys.argv[1])
    engine.capture(["the cat sat ."], what=("attention", "sum_alpha_fx_norm"), layers=(1, 2))
    cache = engine.step.program_cache
    print(json.dumps({"forward": sum("_forward" in t for t in traced),
                      "loaded": cache.loaded, "saved": cache.saved}))
    """
)


@pytest.mark.slow
def test_a_new_process_loads_the_programs_without_tracing_and_replaces_damaged_ones(
    checkpoint, tmp_path
):
    env = dict(os.environ, JAXATTN_PROGRAM_CACHE=str(tmp_path / "programs"))

    def run() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(checkpoint)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run() == {"forward": 1, "loaded": 0, "saved": 1}
    assert run() == {"forward": 0, "loaded": 1, "saved": 0}
    # a damaged file: compiled again in the next process (its first compile), kept whole
    (kept,) = (tmp_path / "programs").glob(f"*{program_cache.SUFFIX}")
    kept.write_bytes(kept.read_bytes()[:1000])
    assert run() == {"forward": 1, "loaded": 0, "saved": 1}
    assert run() == {"forward": 0, "loaded": 1, "saved": 0}


def test_a_program_with_any_custom_call_is_exported():
    """cuDNN's fused attention on GPUs is a custom call jax does not promise to keep stable;
    a kept program is loaded by the same jax alone, so every target is allowed."""

    def uses_a_custom_call(x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.ffi.ffi_call("jaxattn_test_unstable_target", out)(x)

    x = jax.ShapeDtypeStruct((3,), np.float32)
    with pytest.raises(ValueError, match="custom call"):
        jax.export.export(jax.jit(uses_a_custom_call))(x)
    exported = program_cache.export(jax.jit(uses_a_custom_call), x)
    assert "jaxattn_test_unstable_target" in exported.mlir_module()


def test_a_jax_config_value_is_in_the_key(tmp_path):
    cache = program_cache.ProgramCache(tmp_path, "a step", jax.devices()[:1])
    before = cache.key("a call")
    assert cache.key("another call") != before
    old = jax.config.jax_numpy_rank_promotion
    jax.config.update("jax_numpy_rank_promotion", "raise" if old != "raise" else "allow")
    try:
        assert cache.key("a call") != before
    finally:
        jax.config.update("jax_numpy_rank_promotion", old)
    assert cache.key("a call") == before
    other_step = program_cache.ProgramCache(tmp_path, "another step", jax.devices()[:1])
    assert other_step.key("a call") != before


def test_a_program_that_cannot_be_exported_runs_as_traced(
    checkpoint, programs, monkeypatch, caplog
):
    def refuse(*args, **kwargs):
        raise ValueError("this program cannot be exported")

    monkeypatch.setattr(jax.export, "export", refuse)
    engine = jaxattn.load(checkpoint)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        got = _capture(engine, what=("queries",), layers=1)
    assert engine.step.program_cache.saved == 0 and _files(programs) == set()
    warned = [r.getMessage() for r in caplog.records if "cannot keep" in r.getMessage()]
    assert len(warned) == 2 and "this program cannot be exported" in warned[0]
    monkeypatch.setenv(program_cache.ENV, "off")
    _assert_equal(got, _capture(jaxattn.load(checkpoint), what=("queries",), layers=1))


def test_the_cudnn_version_is_in_the_key(tmp_path, monkeypatch):
    """jax reads cuDNN's version while tracing (whether its fused attention serves a layer):
    a program traced with one cuDNN is not loaded with another."""
    from jax._src import lib

    class CudaVersions:
        version = 90100

        def cudnn_get_version(self):
            return self.version

    fake = CudaVersions()
    monkeypatch.setattr(lib, "cuda_versions", fake)
    cache = program_cache.ProgramCache(tmp_path, "a step", jax.devices()[:1])
    program_cache._installed.cache_clear()
    try:
        before = cache.key("a call")
        fake.version = 90800
        program_cache._installed.cache_clear()
        assert cache.key("a call") != before
    finally:
        program_cache._installed.cache_clear()


# -- generation's programs (`jaxattn.engine.kv_cache`) and layer groups' ----------------

PROMPTS = ["The quick brown fox jumps", "Hello, world.", "a b c", "once upon a time"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from llama_fixture import make_llama_checkpoint

    return make_llama_checkpoint(tmp_path_factory.mktemp("llama"))


def _generate(engine) -> list[tuple]:
    """Two prompts generating, two more joining after the first step (the batch grown to
    the next size, the joining prompts prefilled apart, widened and inserted: every
    generation program), run to the end: each prompt's ids."""
    from jaxattn.engine.generate import Continuations

    prompts = engine.tokenize(PROMPTS)
    run = Continuations(engine, prompts[:2], 6, stop_at_eos=False)
    run.step()
    assert run.add(prompts[2:], 6, stop_at_eos=False) == [2, 3]
    assert run._group.shape.batch == 4  # grown from 2, the joining two inserted
    while not run.done:
        run.step()
    return [g.ids for g in run.results()]


def _caches(engine) -> list[np.ndarray]:
    """A group of the prompts prefilled and stepped twice: its caches, on the host."""
    group = _start(engine, PROMPTS[:2])
    group.step()
    group.step()
    return [np.asarray(group.keys), np.asarray(group.values)]


def _start(engine, texts, padded=True):
    """A group of `texts` (`KVDecoder.start`) with room for 2 steps, prefilled."""
    prompts = engine.tokenize(texts)
    need = engine.kv_decoder.need(max(p.length for p in prompts), 3)
    return engine.kv_decoder.start(prompts, need, padded=padded)


def test_a_second_engine_generates_without_tracing_the_generation_programs(
    llama, programs, monkeypatch
):
    from compile_events import GENERATION

    first = jaxattn.load(llama)
    ids = _generate(first)
    kinds = {"prefill", "step", "write", "grow", "insert"}
    saved = first.kv_decoder.program_cache.saved
    assert saved >= len(kinds) and len(_files(programs)) == saved

    second = jaxattn.load(llama)
    with traces(GENERATION) as traced:
        assert _generate(second) == ids
        loaded = _caches(second)
    assert traced == []
    assert (second.kv_decoder.program_cache.loaded, second.kv_decoder.program_cache.saved) == (
        saved,
        0,
    )

    # what the loaded programs compute is what the programs traced now compute, bit for bit
    monkeypatch.setenv(program_cache.ENV, "off")
    fresh = jaxattn.load(llama)
    assert fresh.kv_decoder.program_cache is None
    with traces(GENERATION) as traced:
        assert _generate(fresh) == ids
        for got, want in zip(loaded, _caches(fresh), strict=True):
            np.testing.assert_array_equal(got, want)
    assert len(traced) >= len(kinds)
    assert len(_files(programs)) == saved  # off: nothing written


def test_a_loaded_write_and_insertion_update_the_caches_in_place(llama, programs):
    """The caches are donated to the programs that write them (`KVDecoder`): a loaded
    program takes them as the traced one does (a step's write into their own buffers,
    not into a copy)."""
    for made in ("traced", "loaded"):
        engine = jaxattn.load(llama)
        decoder = engine.kv_decoder
        group = _start(engine, PROMPTS[:2])
        small = _start(engine, PROMPTS[2:3], padded=False)
        small.widen(group.shape.length)  # as a joining prompt's (`Group.admit`)
        keys, values = group.keys, group.values
        at = keys.unsafe_buffer_pointer()
        group.step()  # the step's keys and values written in place
        assert keys.is_deleted() and values.is_deleted(), made
        assert group.keys.unsafe_buffer_pointer() == at, made
        # copies: a numpy view of a CPU array would keep its buffer from being donated
        new, before = np.array(small.keys)[0], np.array(group.keys)
        keys, values = decoder.inserted(group.keys, group.values, small.keys, small.values, 0, 1)
        assert group.keys.is_deleted() and group.values.is_deleted(), made  # donated
        np.testing.assert_array_equal(np.asarray(keys)[1], new)  # row 1: the small group's
        np.testing.assert_array_equal(np.asarray(keys)[0], before[0])  # row 0 as it was
    assert decoder.program_cache.saved == 0
    assert decoder.program_cache.loaded >= 4  # prefill, step, their writes, the insertion


def test_other_static_arguments_are_other_programs(llama, programs):
    """The growth's batch and length are static (the program's shapes): another batch or
    length is a miss and gets its own shapes, the same a hit."""
    first = jaxattn.load(llama).kv_decoder
    keys, values = first.empty(Shape(2, 16, 16))
    assert first.grown(keys, values, 4)[0].shape[0] == 4
    assert first.program_cache.saved == 1
    second = jaxattn.load(llama).kv_decoder
    keys, values = second.empty(Shape(2, 16, 16))
    grown = {"rows": second.grown(keys, values, 8), "positions": second.widened(keys, values)}
    assert (second.program_cache.loaded, second.program_cache.saved) == (0, 2)
    assert grown["rows"][0].shape[0] == 8 and grown["rows"][0].shape[-2] == 16
    assert grown["positions"][0].shape[0] == 2 and grown["positions"][0].shape[-2] == 32
    assert second.grown(keys, values, 4)[0].shape[0] == 4
    assert second.program_cache.loaded == 1


def test_a_damaged_generation_program_is_traced_again(llama, programs, caplog):
    """Cut files (a prefill's and its write's): traced again, the same caches, replaced."""
    kept = np.array(_start(jaxattn.load(llama), PROMPTS[:2]).keys)
    paths = sorted(programs.glob(f"*{program_cache.SUFFIX}"))
    assert len(paths) == 2
    for path in paths:
        path.write_bytes(path.read_bytes()[:-7])
    engine = jaxattn.load(llama)
    with caplog.at_level(logging.WARNING, logger="jaxattn.engine"):
        np.testing.assert_array_equal(np.array(_start(engine, PROMPTS[:2]).keys), kept)
    cache = engine.kv_decoder.program_cache
    assert (cache.loaded, cache.saved) == (0, 2)
    assert sum("did not load" in r.getMessage() for r in caplog.records) == 2
    again = jaxattn.load(llama)
    np.testing.assert_array_equal(np.array(_start(again, PROMPTS[:2]).keys), kept)
    assert again.kv_decoder.program_cache.loaded == 2


GROUP_TEXTS = ["the quick brown fox jumps over the lazy dog", "hello world"]


def _grouped(checkpoint, budget: int) -> tuple[list[dict], object]:
    """A capture of every layer's attention run a layer group at a time (`budget`: the
    output budget, bytes): (its arrays, the engine)."""
    engine = jaxattn.load(checkpoint, output_budget=budget, buckets=(16,))
    caps = engine.capture(GROUP_TEXTS, what=("attention",))
    return [{"attention": c.attention} for c in caps], engine


def test_layer_group_programs_are_kept_and_a_group_s_span_is_in_its_key(
    checkpoint, programs, monkeypatch
):
    groups = ("_forward_group",)
    with traces(groups) as traced:
        kept, first = _grouped(checkpoint, 3500)  # one layer a group: 3 groups
    assert len(traced) == 3 and first.step.program_cache.saved == 3
    with traces(groups) as traced:
        loaded, second = _grouped(checkpoint, 3500)
    assert traced == [] and second.step.program_cache.loaded == 3
    _assert_equal(loaded, kept)
    # two layers a group: spans (0, 2) and (2, 3); the latter's program is kept
    with traces(groups) as traced:
        wider, third = _grouped(checkpoint, 6500)
    assert len(traced) == 1 and (
        third.step.program_cache.loaded,
        third.step.program_cache.saved,
    ) == (1, 1)
    monkeypatch.setenv(program_cache.ENV, "off")
    for budget, got in ((3500, loaded), (6500, wider)):
        with traces(groups) as traced:
            _assert_equal(got, _grouped(checkpoint, budget)[0])
        assert traced  # grouped, traced


def test_another_decoder_of_the_same_shapes_is_a_miss(llama, programs, tmp_path, monkeypatch):
    """The decoder's config is in its programs' key: another RMS norm epsilon (the same
    shapes, other numbers) is a miss, and its prefill computes its own model's caches."""
    from llama_fixture import make_llama_checkpoint

    kept = np.array(_start(jaxattn.load(llama), PROMPTS[:2]).keys)
    other = make_llama_checkpoint(tmp_path / "eps", rms_norm_eps=0.5)
    engine = jaxattn.load(other)
    got = np.array(_start(engine, PROMPTS[:2]).keys)
    assert (engine.kv_decoder.program_cache.loaded, engine.kv_decoder.program_cache.saved) == (
        0,
        2,  # the prefill and its write
    )
    assert not np.array_equal(got, kept)
    monkeypatch.setenv(program_cache.ENV, "off")
    np.testing.assert_array_equal(got, np.array(_start(jaxattn.load(other), PROMPTS[:2]).keys))


def test_concurrent_first_calls_make_one_program(tmp_path):
    """Four threads' first calls of one shape make its program once (loaded or exported,
    compiled and saved once), as one jax.jit compiles it once."""
    import threading

    from jax.sharding import SingleDeviceSharding

    s = SingleDeviceSharding(jax.devices()[0])

    def f(x):
        time.sleep(0.2)  # a model's trace takes a while
        return jax.numpy.cos(x) * 3

    cache = program_cache.ProgramCache(tmp_path, "concurrent", jax.devices()[:1])
    program = program_cache.Program("cos", f, cache, in_shardings=(s,), out_shardings=s)
    x = jax.device_put(jax.numpy.ones((11,)), s)
    start = threading.Barrier(4)

    def first_call():
        start.wait()
        program(x)

    threads = [threading.Thread(target=first_call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.saved == 1


def test_the_attention_block_is_in_the_key(checkpoint, programs):
    """A program traced with one blockwise block size is not loaded by an engine of another
    (the block is static in the program)."""

    def key(block):
        engine = jaxattn.load(checkpoint, attention="blockwise", attention_block=block)
        return engine.step.program_cache.key("a call")

    assert key(5) == key(5)
    assert key(5) != key(7)
    assert key(None) == key(256)  # the default is blockwise.BLOCK
    assert key(np.int64(5)) == key(5)  # a numpy whole number is that number
