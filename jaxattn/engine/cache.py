"""The persistent compilation cache: compile each (spec, shape) once per machine, not per process.

A capture step takes seconds to compile on a CPU and 11-28 s on a GPU (most
of it GEMM autotuning), and a corpus needs a dozen shapes or more: without a
cache every new process pays that again. jaxattn turns JAX's persistent cache
on by default, in a per-user directory:

    $JAXATTN_COMPILATION_CACHE, if set ("off", "0", "false" or "" turn it off);
    else $XDG_CACHE_HOME/jaxattn/xla, else ~/.cache/jaxattn/xla.

`jaxattn.load(compilation_cache_dir=...)` overrides both (False turns it off).
A cache directory the program already gave JAX itself is left alone. On GPUs
JAX keeps XLA's autotuning results in the same directory, and jaxattn the
checkpoints' resolved tokenizers (`jaxattn.checkpoints.tokenizer_cache`).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "JAXATTN_COMPILATION_CACHE"
_OFF = ("", "0", "off", "false", "no")


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/jaxattn/xla, else ~/.cache/jaxattn/xla."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxattn" / "xla"


def remote(value: str | os.PathLike) -> bool:
    """Whether a cache directory is a URL (gs://, s3://: JAX's persistent cache takes
    them), where the caches of local files jaxattn keeps beside it (tokenizers,
    programs) are off."""
    return "://" in os.fspath(value)


def location(value: str | os.PathLike) -> Path | str:
    """A cache directory as given: a local one as a Path, a URL (`remote`) as the string
    it is (a Path would make gs://bucket a local directory gs:/bucket)."""
    return os.fspath(value) if remote(value) else Path(value)


def cache_dir(setting: str | os.PathLike | bool | None = None) -> Path | str | None:
    """The cache directory a `compilation_cache_dir` argument asks for (None: off).

    Args:
      setting: a directory; False for no cache; None for $JAXATTN_COMPILATION_CACHE,
        else the per-user default.
    """
    if setting is False:
        return None
    if setting is not None and setting is not True:
        return location(setting)
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in _OFF else location(env)
    return default_cache_dir()


def enable_compilation_cache(
    directory: str | os.PathLike | bool | None = None, *, explicit: bool = True
) -> Path | str | None:
    """Persist compiled programs across processes in `directory` (see `cache_dir`).

    Args:
      directory: as `cache_dir`'s setting.
      explicit: False leaves a cache directory JAX was already given untouched.

    Returns:
      The directory in use, or None when caching is off.
    """
    import jax

    chosen = cache_dir(directory)
    current = jax.config.jax_compilation_cache_dir
    if chosen is None and explicit and current:  # off, though an earlier load turned it on
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()
        return None
    if chosen is None or (current and not explicit):
        return location(current) if current else None
    jax.config.update("jax_compilation_cache_dir", str(chosen))
    # Every program counts: the capture step is the only thing compiled, and
    # even a 0.5 s compile is worth keeping.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return chosen


# JAX's own setting, read when jax is imported: a process that set it keeps it
# (`enable_compilation_cache(explicit=False)`, what `jaxattn.load()` does by default).
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"


def cache_dir_in_use() -> tuple[Path | str | None, str]:
    """The directory a `jaxattn` command's `jaxattn.load()` caches in, found without
    importing jax, and the setting that chose it ("NAME=VALUE"; "" for the default):
    $JAX_COMPILATION_CACHE_DIR where set, else `cache_dir()`."""
    given = os.environ.get(JAX_ENV)
    if given:
        return location(given), f"{JAX_ENV}={given}"
    env = os.environ.get(ENV)
    return cache_dir(), ("" if env is None else f"{ENV}={env}")
