"""Traced programs kept on disk, so that a new process skips tracing the model.

XLA's persistent compilation cache (`jaxattn.engine.cache`) saves a program's
compile, not what comes before it: to look a program up there JAX first traces
the model and lowers it to HLO, whose hash is the key. For a capture step that
is most of a cached first capture (all-MiniLM-L6-v2, 100 EWT sentences, 8
programs, the 2-core CPU: tracing 2.4 s and lowering 0.5 s of a 5.3 s first
capture; BENCHMARKS.md "The program cache"). This cache keeps each program as
JAX exports it (`jax.export`: the lowered StableHLO with its shardings,
serialized), beside XLA's cache, under a key of everything that decides the
program without tracing it:

- the process: the jaxattn source (a digest of its .py files), the versions of
  jax, jaxlib, flax and numpy, the backend and its version, the cuDNN version
  (read while tracing), $XLA_FLAGS and every `jax.config` value;
- the step (`CaptureStep`): the model config, the params' names, shapes and
  dtypes (values are arguments, not part of the program), the devices, where
  outputs land, the layer loop, the attention path and block; a generation's
  (`kv_cache.KVDecoder`): the model config, the params' signature, the layer loop,
  the matmul platform, the devices and its spec;
- the call: the program (`Program`: the whole model's capture, a layer group's, a
  generation's prefill, step, write, growth or insertion, each with the shardings
  and donation its code fixes), its static arguments (the `CaptureSpec`, a layer
  group's span, a growth's batch and length) and each other argument's shape and
  dtype.

A key that differs is a miss (traced, exported, saved), never a wrong program: a
wrong hit would need two programs with one key, and every input that shapes a
program is in it. Code that changes a traced function or a module constant at
run time (a test's monkeypatch of a function or of `blockwise.AUTO_MIN_LENGTH`) is
not: such tests turn the cache off ($JAXATTN_PROGRAM_CACHE=off).
Either way the step runs the exported program (compiled through XLA's cache as
any other), so a process that traced it and one that loaded it run the same one.
A program with donated arguments (a generation's caches, written in place) is
compiled from its exported form with the same donation: the loaded program takes
the caches' buffers as the traced one does.

Why exported programs and not compiled executables
(`jax.experimental.serialize_executable`, which would skip the compile too): on
the CPU (jax 0.10) an executable serialized in a process that holds other
executables with the same kernels (one XLA's cache loaded, an earlier compile of
the same program) leaves those kernels out, and its loaded copy fails at run time
("Function iota_gather_fusion not found"). An exported program is data (no
pickle) and XLA's own cache keeps the compile.

On disk: `<compilation cache directory>/jaxattn-programs/<key>.jaxprog`, written
atomically (a temporary file renamed), the least recently used removed past
`MAX_BYTES`. Each file holds the sha256 of the serialized program before it: the
serialized form has no check of its own and its module is only parsed when the
program is compiled, so a damaged byte there failed the capture ("Failed to
deserialize StableHLO"), crashed the process, or (in a constant) changed the
numbers. A file whose digest does not match, or that does not load (another jax),
is a miss and is replaced; so is a loaded program that does not compile.

Off where the compilation cache is off (unless $JAXATTN_PROGRAM_CACHE names a
directory), where its directory is not a local path (gs://), in multi-process jobs,
for a capture step whose outputs go to pinned host memory (an exported program does
not carry memory kinds; a generation's programs write to device memory: kept) and
without the flatbuffers package (jax.export's serialization);
$JAXATTN_PROGRAM_CACHE set to off, 0, false or no turns it off, set to a directory
keeps the programs there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jaxattn.engine import cache

log = logging.getLogger("jaxattn.engine")

ENV = "JAXATTN_PROGRAM_CACHE"
_OFF = ("0", "off", "false", "no")
SUBDIRECTORY = "jaxattn-programs"
SUFFIX = ".jaxprog"
# A program file: MAGIC, the sha256 of the serialized program, the serialized program.
MAGIC = b"jaxattn-program-1\n"
# Past this the least recently used programs go (an all-MiniLM-L6-v2 full capture's: ~0.2 MB).
MAX_BYTES = 2 << 30
# A temporary file this old is a write a killed process left (a write takes well under a second).
STALE_SECONDS = 3600
# The packages whose code is traced into a program, besides jaxattn's own source.
_TRACED_PACKAGES = ("jax", "jaxlib", "flax", "numpy", "ml_dtypes")


def directory(compilation_cache: str | None = None) -> Path | None:
    """Where this process keeps programs, or None where the cache is off (module
    docstring; `directory_before_jax`'s rule, with JAX's compilation cache setting by
    default, and off in multi-process jobs)."""
    import jax

    if jax.process_count() > 1:
        return None
    return directory_before_jax(compilation_cache or jax.config.jax_compilation_cache_dir)[0]


@functools.cache
def _source_digest() -> str:
    """sha256 of jaxattn's .py files (names and bytes), read once per process."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _installed() -> str:
    """What the process was started with: jaxattn's source, the traced packages' versions,
    Python, the backend, the XLA flags (read when the backend starts), cuDNN's version.
    Once per process."""
    import jax

    versions = []
    for name in _TRACED_PACKAGES:
        try:
            versions.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name}=?")
    backend = jax.devices()[0].client
    return repr(
        (
            _source_digest(),
            versions,
            sys.version_info[:2],
            backend.platform,
            backend.platform_version,
            os.environ.get("XLA_FLAGS", ""),
            os.environ.get("LIBTPU_INIT_ARGS", ""),
            _cudnn_version(),
        )
    )


def _cudnn_version() -> int | None:
    """The cuDNN version jax finds (None: none, no CUDA). jax reads it while tracing: it
    decides whether cuDNN's fused attention serves a layer (`fast_forward`) and what the
    custom call asks of cuDNN, and cuDNN is a package of its own, not jaxlib's version."""
    try:
        from jax._src.lib import cuda_versions
    except ImportError:  # pragma: no cover - a jax without it
        return None
    try:
        return None if cuda_versions is None else int(cuda_versions.cudnn_get_version())
    except Exception:  # noqa: BLE001 - no usable cuDNN: as jax sees it, none
        return None


def _process_part() -> str:
    """What every program of this process depends on besides its step and call: what it
    was started with, and every jax.config value now."""
    import jax

    config = sorted((name, repr(value)) for name, value in jax.config.values.items())
    return repr((_installed(), config))


def signature(tree) -> str:
    """A pytree's structure with each leaf's shape and dtype (not its values)."""
    import jax

    leaves, structure = jax.tree.flatten(tree)
    shapes = [(tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x)))) for x in leaves]
    return repr((str(structure), shapes))


def devices_part(devices: Sequence) -> str:
    """The devices a program runs on, as a key part."""
    return repr([(d.platform, d.device_kind, d.id, d.process_index) for d in devices])


class ProgramCache:
    """One step's programs on disk (`directory()`); `part` is the step's own key part
    (config, params signature, placement: `CaptureStep`)."""

    def __init__(self, root: Path, part: str, devices: Sequence):
        self.root, self.devices = root, tuple(devices)
        self.platform = platform_of(self.devices[0])  # what its programs are exported for
        self._part = repr((devices_part(devices), part))
        self.loaded = self.saved = 0  # programs this step read from and wrote to disk
        self._unwritable = False  # a save failed: warned once, not tried again by this step

    @classmethod
    def for_step(cls, part: str, devices: Sequence) -> ProgramCache | None:
        """The cache of a step on `devices`, or None where it is off (or this jax cannot
        serialize programs: jax.export's serialization needs the flatbuffers package)."""
        root = directory()
        if root is None:
            return None
        if importlib.util.find_spec("flatbuffers") is None:
            return None
        return cls(root, part, devices)

    def key(self, call: str) -> str:
        """The file name stem of one call's program (`call`: its spec and signature), under
        the process's state now (a jax.config value changed since counts)."""
        whole = "\0".join((_process_part(), self._part, call))
        return hashlib.sha256(whole.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    def load(self, key: str):
        """The program saved under `key` (a `jax.export.Exported`), or None: a miss (a file
        that does not deserialize is removed)."""
        import jax

        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payload, damage = _payload(data)
        if payload is None:
            self.discard(key, damage)
            return None
        try:
            exported = jax.export.deserialize(bytearray(payload))
        except Exception as error:  # noqa: BLE001 - any damage is a miss, then replaced
            self.discard(key, error)
            return None
        try:
            os.utime(path)  # recently used: the last to be removed
        except OSError:
            pass
        self.loaded += 1
        return exported

    def save(self, key: str, exported) -> None:
        """Write `exported` (a `jax.export.Exported`) under `key`; a directory that cannot be
        written is logged once and not tried again by this step (a warmup of a hundred
        shapes on a read-only volume: one warning, not a hundred)."""
        if self._unwritable:
            return
        temporary = None
        try:
            payload = exported.serialize()
            data = MAGIC + hashlib.sha256(payload).digest() + payload
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, suffix=".tmp", delete=False) as f:
                temporary = Path(f.name)
                f.write(data)
            os.replace(temporary, self._path(key))
            temporary = None
        except Exception as error:  # noqa: BLE001 - the capture goes on without it
            log.warning(
                "the program cache could not keep a program in %s (%s): this engine's "
                "programs are traced in each new process",
                self.root,
                error,
            )
            self._unwritable = True
            return
        finally:  # an error, or an interrupt (Ctrl-C) mid-write: no partial file left
            if temporary is not None:
                temporary.unlink(missing_ok=True)
        self.saved += 1
        _trim(self.root, MAX_BYTES)

    def discard(self, key: str, error: BaseException | str) -> None:
        """Remove the program under `key`, which did not load or compile (`error`): a
        miss, traced again and replaced."""
        path = self._path(key)
        log.warning("the program cache's %s did not load (%s): tracing it again", path, error)
        path.unlink(missing_ok=True)


def _payload(data: bytes) -> tuple[bytes | None, str]:
    """(the serialized program of a program file's bytes, "") (module docstring), or
    (None, why not): not a program file, or one whose program does not match its digest."""
    head = len(MAGIC) + hashlib.sha256().digest_size
    if not data.startswith(MAGIC) or len(data) < head:
        return None, "not a jaxattn program file"
    payload = data[head:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : head]:
        return None, "damaged: its program does not match its sha256"
    return payload, ""


class Program:
    """A function jitted with its options (`jax.jit`'s), and its compiled programs: one per
    call in this process, and with a `ProgramCache` its exported ones on disk (module
    docstring), for the capture step's programs and a generation's alike.

    Static arguments come first (`static`: how many); `fixed` names arguments that are
    the same arrays at every call (the weights), left out of the in-process key so a
    call costs no walk over them (their signature is in the disk key). A program is
    compiled with the jit's shardings and donation, whether traced or loaded: a loaded
    program updates its donated buffers in place as the traced one does.
    """

    def __init__(
        self,
        name: str,
        fun,
        cache: ProgramCache | None,
        *,
        in_shardings,
        out_shardings,
        static: int = 0,
        donate: tuple[int, ...] = (),
        fixed: tuple[int, ...] = (),
    ):
        import jax

        self.name, self.cache, self._static = name, cache, static
        # a function of its static arguments' values: the other arguments' shardings,
        # donation counted among them (what an exported program's call takes)
        self._options = dict(
            in_shardings=in_shardings,
            out_shardings=out_shardings,
            donate_argnums=tuple(i - static for i in donate),
        )
        self.jit = jax.jit(
            fun,
            static_argnums=tuple(range(static)),
            in_shardings=in_shardings,
            out_shardings=out_shardings,
            donate_argnums=donate,
        )
        self._fixed = frozenset(fixed)
        self._compiled: dict = {}
        # One lock a key: concurrent first calls of one program make it once (loaded or
        # exported, compiled, saved), other keys' compiles still run side by side.
        self._making: dict = {}
        self._lock = threading.Lock()

    def __call__(self, *args):
        """Run the program of these arguments (static ones first), compiled at its first call."""
        return self.compiled(*args)(*args[self._static :])

    def compiled(self, *args):
        """The compiled program of these arguments (arrays, or `jax.ShapeDtypeStruct`s with
        their shardings: compiled ahead of time): made in this process already; else, with
        the program cache on, its exported program loaded from disk, or traced, exported
        and kept there; else traced. Then compiled (XLA's persistent cache may hold the
        compile). A loaded program that does not compile is removed from the cache and
        traced again; one this process exported is kept once it compiled, else the
        function runs as traced (`cannot_keep`). Out of device memory compiling passes
        on (the arguments' size, not the file: kept)."""
        key = self._key(args)
        program = self._compiled.get(key)
        if program is not None:
            return program
        with self._lock:
            making = self._making.setdefault(key, threading.Lock())
        with making:
            program = self._compiled.get(key)
            if program is None:
                program = self._compiled[key] = self._make(args)
        return program

    def _key(self, args) -> tuple:
        """A call's program in this process: the static arguments, the others' shapes and
        dtypes but the fixed ones', and JAX's trace context (the config values a jit
        cache keys on)."""
        import jax

        varying = [
            a for i, a in enumerate(args[self._static :], self._static) if i not in self._fixed
        ]
        leaves, structure = jax.tree.flatten(varying)
        shapes = tuple((getattr(x, "shape", ()), getattr(x, "dtype", None)) for x in leaves)
        return (args[: self._static], structure, shapes, _trace_context())

    def _make(self, args):
        from jaxattn.engine.oom import out_of_memory

        disk, name, exported, unkept, program = self.cache, None, None, None, None
        static, rest = args[: self._static], args[self._static :]
        if disk is not None:
            name = disk.key(repr((self.name, static, signature(rest))))
            exported = disk.load(name)
            if exported is not None:
                try:
                    program = self.compile_exported(exported, rest)
                except Exception as error:  # noqa: BLE001 - traced again below
                    if out_of_memory(error):  # the arguments' size, not the file: kept
                        raise
                    disk.discard(name, error)
                    exported = None
            if program is None:
                exported = export(self.jit, *args, platform=disk.platform)
                if isinstance(exported, Exception):
                    unkept, exported = exported, None
        if program is None and exported is not None:
            try:
                program = self.compile_exported(exported, rest)
            except Exception as error:  # noqa: BLE001 - traced as it is below
                if out_of_memory(error):
                    raise
                unkept = error
            else:
                disk.save(name, exported)  # once it compiled
        if program is None:
            program = self.jit.trace(*args).lower().compile()
            if unkept is not None:  # the function traced: the export's own failure
                cannot_keep(unkept)
        return program

    def compile_exported(self, exported, args: tuple):
        """`exported` (a `jax.export.Exported` of this function) compiled for these
        (non-static) arguments, with the jit's shardings and donation."""
        import jax

        return jax.jit(exported.call, **self._options).trace(*args).lower().compile()


def _trace_context():
    """What jit's own cache keys on besides the arguments (x64, precision defaults, ...)."""
    try:
        from jax._src.config import trace_context
    except ImportError:  # pragma: no cover - a jax without it: the config's values
        import jax

        return repr(sorted(jax.config.values.items()))
    return trace_context()


def export(jitted, *args, platform: str | None = None):
    """`jax.export.export(jitted)(*args)` for `platform` (a `platform_of` name; None: the
    default backend's), or the error that kept it from being exported (the caller
    traces the jitted function as it is, which raises an error of the program itself,
    and says so where that works: `cannot_keep`).

    Every custom call is allowed (on GPUs cuDNN's fused attention, whose targets jax
    does not promise to keep stable across versions): an exported program is loaded
    only by the same jax and jaxlib on the same backend (the key holds them)."""
    import jax

    anything = [jax.export.DisabledSafetyCheck.custom_call("ALL")]
    platforms = None if platform is None else (platform,)
    try:
        return jax.export.export(jitted, platforms=platforms, disabled_checks=anything)(*args)
    except Exception as error:  # noqa: BLE001 - the program runs unexported
        return error


def cannot_keep(error: BaseException) -> None:
    """Log that a program traced fine but `export` could not keep it (`error`)."""
    log.warning("the program cache cannot keep this program (%s): tracing it each time", error)


def platform_of(device) -> str:
    """The platform jax.export lowers for to run on `device`: "cpu", "cuda", "rocm",
    "tpu" (a GPU's "gpu" made concrete). Not the default backend's: an engine may run
    on another backend's devices (the CPU's on a GPU machine), and a program exported
    for the default one does not run there."""
    try:
        from jax._src.xla_bridge import canonicalize_platform
    except ImportError:  # pragma: no cover - a jax without it
        return device.platform
    return canonicalize_platform(device.platform)


def _trim(root: Path, limit: int) -> None:
    """Remove the least recently used programs of `root` until they hold <= limit bytes,
    and the temporary files of writes a killed process left (`STALE_SECONDS` old)."""
    now = time.time()
    for path in root.glob("*.tmp"):
        try:
            if now - path.stat().st_mtime > STALE_SECONDS:
                path.unlink(missing_ok=True)
        except OSError:  # renamed or removed by its process meanwhile
            continue
    entries = []
    for path in root.glob(f"*{SUFFIX}"):
        try:
            stat = path.stat()
        except OSError:  # removed by another process meanwhile
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size


def directory_before_jax(compilation_cache: str | os.PathLike | None) -> tuple[Path | None, str]:
    """`directory()` without importing jax (the command line's `jaxattn cache`), for one
    process whose compilation cache directory is `compilation_cache` (None: off): the
    directory, or None and why it is off."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() in _OFF:
        return None, f"{ENV}={setting}"
    if setting:
        return Path(setting), ""
    if not compilation_cache:
        return None, "the compilation cache is off"
    if cache.remote(compilation_cache):
        return None, "the compilation cache is not a local directory"
    return Path(compilation_cache) / SUBDIRECTORY, ""
