"""A dump job, as run by one process: its shards of the input into the store.

The job plans the input (`jaxattn.dump.sharding`), creates the store or checks
that it was started by the same command (`jaxattn.store.metadata`), skips the
shards already committed, and runs the others (`jaxattn.dump.shard`). So
rerunning a killed job with the same command finishes it, and each input
example lands in the store exactly once (STORE.md, "Resuming").
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from jaxattn.dump import sharding
from jaxattn.dump.counts import Counts, left_out, summary
from jaxattn.dump.distributed import Process
from jaxattn.dump.shard import ShardTask
from jaxattn.errors import UsageError
from jaxattn.inputs import ON_ERROR, TOO_LONG
from jaxattn.progress import Progress
from jaxattn.store import layout
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import KeyValue, local_path, root_spec, store_context
from jaxattn.store.location import check_output, hold_writer_lock

# Test hook: crash (os._exit) halfway through the shard after this many commits.
CRASH_ENV = "JAXATTN_DUMP_CRASH_AFTER"
_MAX_MESSAGES = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class DumpOptions:
    """What to dump where (the `jaxattn dump` flags).

    Attributes:
      input: the input file.
      out: the store: a directory or a TensorStore kvstore URL.
      what, layers, heads, dtype, precision, query_positions, key_positions: the
        capture spec (as `Engine.capture`); a record whose text lacks a selected
        position is a bad record (see on_error).
      input_format: text, jsonl or conllu; None detects it.
      shard_size: input records per shard.
      on_error: "stop" at the first unreadable record, or "skip" it.
      too_long: "error" (a bad record, see on_error), "truncate" or "skip" for
        texts over the model's maximum.
      chunk_bytes: uncompressed bytes per array chunk.
      quiet: no progress bar (the summary line is still printed).
      limit: only the first `limit` records of the input (None: all).
      generate: a decoder first continues each text by up to this many greedily
        generated tokens (`jaxattn.engine.generate`); each example is then its
        prompt + continuation, its `generated_start` in the manifest. too_long
        applies to prompt + new tokens. None: texts captured as they are.
      stop_at_eos: with `generate`: end a continuation at an EOS token (`Engine.eos_ids`).
      overwrite: delete a jaxattn store at `out` and start it over (one process only).
    """

    input: Path
    out: str
    what: tuple[str, ...] | None = ("attention",)
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    dtype: str = "float32"
    precision: str = "highest"
    query_positions: tuple[int, ...] | None = None
    key_positions: tuple[int, ...] | None = None
    input_format: str | None = None
    shard_size: int = sharding.DEFAULT_SHARD_SIZE
    on_error: str = "stop"
    too_long: str = "error"
    chunk_bytes: int = layout.DEFAULT_CHUNK_BYTES
    quiet: bool = False
    limit: int | None = None
    generate: int | None = None
    stop_at_eos: bool = True
    overwrite: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class DumpResult:
    """What one process did: its counts, its shards, and the time it took."""

    counts: Counts
    shards: int
    resumed: int
    seconds: float
    stored: int | None


def _check(options: DumpOptions) -> None:
    if options.on_error not in ON_ERROR:
        raise UsageError(f"--on-error {options.on_error!r} is not one of {', '.join(ON_ERROR)}")
    if options.too_long not in TOO_LONG:
        raise UsageError(f"--too-long {options.too_long!r} is not one of {', '.join(TOO_LONG)}")
    if options.chunk_bytes < layout.MIN_CHUNK_BYTES:
        raise UsageError(
            f"--chunk-bytes {options.chunk_bytes} is too small: at least "
            f"{layout.MIN_CHUNK_BYTES} (4 KiB; the default is 1 MiB), or every "
            "chunk file holds a few numbers"
        )


class DumpJob:
    """One process's part of a dump: its shards, the store, progress and messages."""

    def __init__(self, engine, options: DumpOptions, model_dir, process: Process, stream):
        self.engine, self.options, self.process, self.stream = engine, options, process, stream
        if options.generate is not None:  # an encoder, or no next-token head: refused now
            from jaxattn.continuations import check_new_tokens
            from jaxattn.engine.generate import check_generator

            check_generator(engine)
            check_new_tokens(options.generate, "generate")
        precision = engine.precision if options.precision is None else options.precision
        self.spec = _spec(engine.config, options, precision)
        self.plan = _plan(options, process)
        from jaxattn.dump.fingerprint import checkpoint_fingerprint

        self.kv = KeyValue(root_spec(options.out))
        self.meta = _metadata(
            options,
            self.spec,
            self.plan,
            model_info=dataclasses.asdict(engine.info),
            fingerprint=checkpoint_fingerprint(model_dir),
            config=engine.config.to_dict(),
        )
        self.label = _label(process)
        self.progress = Progress(0, self.label, enabled=not options.quiet, stream=stream)
        self.messages = 0
        self.committed = 0
        crash = os.environ.get(CRASH_ENV)
        self.crash_after = int(crash) if crash else None

    def crash_now(self) -> bool:
        return self.crash_after is not None and self.committed == self.crash_after

    def message(self, text: str) -> None:
        self.messages += 1
        if self.messages <= _MAX_MESSAGES:
            self.progress.message(f"{self.label}: {text}")
        elif self.messages == _MAX_MESSAGES + 1:
            self.progress.message(f"{self.label}: further bad records are counted, not shown")

    def _start_over(self) -> None:
        """Delete the store at --out, saying so: with --overwrite, or when it was begun
        by another command and holds no finished shard (a dump that failed on its first
        shard, rerun with the option its error advised). Other processes of a job may be
        writing: only a job of one process starts a store over by itself."""
        existing = store_metadata.read(self.kv)
        if existing is None:
            return
        if self.options.overwrite:
            why = "--overwrite"
        else:
            diff = store_metadata.differences(existing, self.meta)
            if not diff or self.process.count > 1 or store_metadata.finished_parts(self.kv):
                return  # resumed, or refused by create_or_check
            why = f"no shard of it was finished, and this command differs: {'; '.join(diff)}"
        self.kv.delete_all()
        self.progress.message(f"{self.label}: started the store at {self.options.out} over ({why})")

    def run(self) -> DumpResult:
        start = time.monotonic()
        check_output(self.options.out, self.options.overwrite)
        lock = hold_writer_lock(self.options.out, self.process.count)
        try:
            return self._run(start)
        finally:
            if lock is not None:
                os.close(lock)

    def _run(self, start: float) -> DumpResult:
        self._start_over()
        store_metadata.create_or_check(self.kv, self.meta)
        done = done_shards(self.kv)
        mine = sorted(self.plan.shards)
        todo = [k for k in mine if k not in done]
        self.context = store_context()
        self.progress.total = sum(len(self.plan.shards[k]) for k in todo)
        counts = Counts()
        for shard in todo:
            counts.add(ShardTask(self, shard).run())
            self.committed += 1
        return finish(self.progress, self.kv, self.spec.what, counts, mine, todo, start)


def _spec(config, options: DumpOptions, precision: str):
    """The capture spec `options` ask of the model of `config` (`spec.spec_for`)."""
    from jaxattn.spec import spec_for

    return spec_for(
        config,
        options.what,
        options.layers,
        options.heads,
        options.dtype,
        precision,
        query_positions=options.query_positions,
        key_positions=options.key_positions,
    )


def _label(process: Process) -> str:
    """What the job's lines begin with: "dump", and the process ("dump p1/4") if several."""
    return " ".join(x for x in ("dump", process.label) if x)


def _plan(options: DumpOptions, process: Process) -> sharding.InputPlan:
    """This process's shards of the input (`sharding.plan_shards`)."""
    return sharding.plan_shards(
        options.input,
        fmt=options.input_format,
        shard_size=options.shard_size,
        process_index=process.index,
        process_count=process.count,
        limit=options.limit,
    )


def _metadata(options: DumpOptions, spec, plan, *, model_info, fingerprint, config) -> dict:
    """The store metadata of the command of `options` (`store_metadata.build`)."""
    return store_metadata.build(
        model_info=model_info,
        model_fingerprint=fingerprint,
        model_config=config,
        spec=spec,
        input_info=plan.info,
        shard_size=options.shard_size,
        too_long=options.too_long,
        chunk_bytes=options.chunk_bytes,
        generate=options.generate,
        stop_at_eos=options.stop_at_eos,
    )


def done_shards(kv: KeyValue) -> set[int]:
    """The shards the store at `kv` holds committed (a manifest part each)."""
    return {layout.shard_of_manifest_key(k) for k in kv.list(layout.MANIFEST_DIR + "/")}


def finish(progress: Progress, kv: KeyValue, what, counts: Counts, mine, todo, start: float):
    """A process's `DumpResult` of its shards `mine`, of which it ran `todo` (the others
    were done) since `start` (time.monotonic), its summary line said through `progress`."""
    progress.close()
    seconds = time.monotonic() - start
    stored = stored_bytes(kv.spec, todo, what)
    result = DumpResult(
        counts=counts,
        shards=len(mine),
        resumed=len(mine) - len(todo),
        seconds=seconds,
        stored=stored,
    )
    progress.message(
        summary(
            progress.label,
            counts,
            seconds=seconds,
            shards=result.shards,
            resumed=result.resumed,
            stored=stored,
        )
    )
    return result


def stored_bytes(root: dict, shards, what) -> int | None:
    """On-disk bytes of these shards' arrays and manifest parts (local stores only)."""
    base = local_path(root)
    if base is None:
        return None
    total = 0
    for shard in shards:
        paths = [os.path.join(base, layout.array_path(q, shard)) for q in what]
        for path in paths:
            for dirpath, _, files in os.walk(path):
                total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
        part = os.path.join(base, layout.manifest_key(shard))
        total += os.path.getsize(part) if os.path.exists(part) else 0
    return total


def run_dump(
    engine,
    options: DumpOptions,
    *,
    model_dir: str | os.PathLike,
    process: Process | None = None,
    stream: TextIO | None = None,
) -> DumpResult:
    """Dump this process's shards of `options.input` into `options.out`.

    Args:
      engine: a loaded `Engine` (data parallel over this process's devices).
      options: input, store, spec and policies.
      model_dir: the engine's checkpoint directory (fingerprinted into the store).
      process: this process's index and the process count (single by default).
      stream: progress, messages and the summary line (stderr).

    Returns:
      This process's counts; the store is complete once every process returns.

    Raises:
      StoreMismatch: the store exists and was written by a different command (and
        holds a finished shard, or the job has several processes).
      UsageError: a bad option or spec; overwrite in a job of several processes; an
        out that is a file, or a non-empty directory that is not a jaxattn store;
        a local store another dump is writing now (`hold_writer_lock`).
      InputError: an input without records (before anything is written); a
        bad record with on_error="stop" (naming the file and line).
      CaptureFileError: TensorStore failed (naming the store and the operation).
      FileNotFoundError: no input file or model directory.
    """
    _check(options)
    process = process or Process()
    if options.overwrite and process.count > 1:
        raise UsageError(
            f"--overwrite in a job of {process.count} processes: each would delete the "
            "shards the others write; delete the store first, then start the job without it"
        )
    job = DumpJob(engine, options, model_dir, process, stream or sys.stderr)
    return job.run()


def finished_dump(
    options: DumpOptions,
    *,
    model_dir: str | os.PathLike,
    model_name: str | None = None,
    process: Process | None = None,
    stream: TextIO | None = None,
) -> DumpResult | None:
    """`run_dump`'s answer for a store this very command already finished, given before
    any model is loaded: every shard already done, the same summary line. None where
    `run_dump` must answer: no store at `options.out`, a store with shards to do, or
    --overwrite; or this command may differ from the store's (run_dump then refuses it,
    naming the difference, as before).

    The model is the store's when the checkpoint at `model_dir` has the store's
    fingerprint (`checkpoint_fingerprint`: the same files) and the store's model name
    (`model_name`: the name the command's model reports, `loading.model_name`; None:
    the checkpoint's own, as `jaxattn.load(model_dir)` names it; a directory renamed
    since gives another name, refused by `run_dump` as a resume is). Its config is then the one
    the store recorded, and the capture spec and store metadata are built from that
    config as a loaded engine's would be, and compared field by field
    (`store_metadata.differences`).

    Raises:
      UsageError, InputError, CaptureFileError, FileNotFoundError: as `run_dump`, for
        a bad option, spec or input, or a damaged store.
    """
    from jaxattn.config import ModelConfig
    from jaxattn.dump.fingerprint import checkpoint_fingerprint
    from jaxattn.errors import CheckpointError

    start = time.monotonic()
    _check(options)
    process = process or Process()
    if options.overwrite or options.precision is None:  # None: the engine's own default
        return None
    kv = KeyValue(root_spec(options.out))
    existing = store_metadata.read(kv)
    if existing is None:
        return None
    count = existing["shards"]["count"]
    recorded = existing["model"].get("config")
    if not isinstance(recorded, dict) or not set(range(count)) <= done_shards(kv):
        return None
    if not Path(model_dir).is_dir():
        return None
    fingerprint = checkpoint_fingerprint(model_dir)
    if fingerprint != existing["model"].get("fingerprint"):
        return None
    if model_name is None:
        from jaxattn.checkpoints.loading import model_name as name_of
        from jaxattn.checkpoints.model_ref import Resolved

        try:
            model_name = name_of(Resolved(Path(model_dir)))
        except (CheckpointError, FileNotFoundError):  # the loader says what is wrong
            return None
    if model_name != existing["model"].get("name"):
        return None
    try:
        config = ModelConfig.from_dict(recorded)
    except CheckpointError:  # a config of another jaxattn: the loaded model decides
        return None
    spec, plan = _spec(config, options, options.precision), _plan(options, process)
    model = {k: v for k, v in existing["model"].items() if k not in ("fingerprint", "config")}
    # the model's name and weights fingerprint: the store's (the same files)
    meta = _metadata(
        options, spec, plan, model_info=model, fingerprint=fingerprint, config=recorded
    )
    if store_metadata.differences(existing, meta):
        return None
    progress = Progress(0, _label(process), enabled=not options.quiet, stream=stream or sys.stderr)
    mine = sorted(plan.shards)
    return finish(progress, kv, spec.what, Counts(), mine, [], start)


def store_status(location: str) -> str:
    """One line on a store's completeness, read from its committed manifest parts."""
    from jaxattn.store.reader import read_parts

    kv = KeyValue(root_spec(location))
    meta = store_metadata.read(kv)
    if meta is None:
        return f"no store at {location}"
    parts = read_parts(kv, meta["shards"]["count"])
    counts = Counts()
    for part in parts.values():
        counts.examples += len(part.examples)
        counts.truncated += part.truncated
        counts.skipped += part.count("too_long")
        counts.errors += part.count("error")
    state = "complete" if len(parts) == meta["shards"]["count"] else "incomplete"
    return (
        f"store {location}: {state}, {len(parts)}/{meta['shards']['count']} shards, "
        f"{counts.examples} examples of {meta['input']['records']} records, "
        f"{left_out(counts)}, {counts.truncated} truncated"
    )
