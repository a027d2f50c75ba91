"""The persistent compilation cache: on by default, per user, with a way to move or stop it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxattn.engine.cache import cache_dir, default_cache_dir


def test_where_the_cache_goes(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXATTN_COMPILATION_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == default_cache_dir() == tmp_path / "jaxattn" / "xla"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "jaxattn" / "xla"
    for off in ("off", "0", "false", ""):
        monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", off)
        assert cache_dir() is None
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    assert cache_dir(tmp_path / "y") == tmp_path / "y" and cache_dir(False) is None


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jaxattn
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    engine = jaxattn.load(sys.argv[1])
    engine.capture(["i went to the store ."], what=("attention",))
    print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                      "misses": events.count("/jax/compilation_cache/cache_misses"),
                      "dir": jax.config.jax_compilation_cache_dir}))
    """
)


def _run(checkpoint, env) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(checkpoint)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_compiles_nothing(bert_checkpoint, tmp_path):
    env = dict(os.environ, JAXATTN_COMPILATION_CACHE=str(tmp_path / "c"))
    first = _run(bert_checkpoint, env)
    assert first["misses"] >= 1 and first["dir"] == str(tmp_path / "c")
    assert any((tmp_path / "c").iterdir())
    second = _run(bert_checkpoint, env)
    assert second["misses"] == 0 and second["hits"] >= first["misses"]
    # "off" in the environment: test_where_the_cache_goes and the next test (in-process).


def test_off_turns_off_a_cache_an_earlier_load_turned_on(tmp_path):
    script = textwrap.dedent("""
        import jax
        from jaxattn.engine.cache import enable_compilation_cache
        assert enable_compilation_cache(sys.argv[1]) is not None
        assert jax.config.jax_compilation_cache_dir == sys.argv[1]
        assert enable_compilation_cache(False) is None
        assert not jax.config.jax_compilation_cache_dir
        print("ok")
    """)
    out = subprocess.run(
        [sys.executable, "-c", "import sys\n" + script, str(tmp_path / "c")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_remote_cache_directory_stays_a_url(monkeypatch, tmp_path):
    """JAX's persistent cache takes gs:// and other URLs: kept as the string given (as a
    Path, gs://bucket/xla became the local directory gs:/bucket/xla); no tokenizer entry
    is kept there (the tokenizer cache is local files)."""
    from jaxattn.checkpoints import tokenizer_cache
    from jaxattn.engine.cache import location

    assert cache_dir("gs://bucket/xla") == "gs://bucket/xla"
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", "s3://bucket/xla")
    assert cache_dir() == "s3://bucket/xla"
    assert location(tmp_path / "x") == tmp_path / "x" and isinstance(location("x"), Path)
    assert tokenizer_cache.entry("gs://bucket/xla", tmp_path) is None
    assert tokenizer_cache.entry(tmp_path, tmp_path).parent == tmp_path / "jaxattn-tokenizers"
