"""Sharding the input: which records form which shard, and which shards are ours.

Shard k holds records [k * shard_size, (k + 1) * shard_size) of the input, and
belongs to process k % process_count. The plan depends only on the input and
the shard size, never on the process count, so a job may be resumed with more
or fewer processes. Each process scans the file's raw bytes once (finding
record boundaries and fingerprinting the content), keeps only the records of
its own shards, and parses nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from jaxattn.errors import InputError, UsageError
from jaxattn.inputs import READER, RawRecord, detect_format, scan_records
from jaxattn.inputs.formats import check_format
from jaxattn.store.metadata import InputInfo

DEFAULT_SHARD_SIZE = 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputPlan:
    """This process's share of the input.

    Attributes:
      path: the input file.
      info: the input's identity (format, fingerprint, record count).
      shard_size: records per shard.
      num_shards: shards in the whole input.
      shards: shard index -> its raw records, for this process's shards only.
    """

    path: Path
    info: InputInfo
    shard_size: int
    num_shards: int
    shards: dict[int, list[RawRecord]]

    def records(self, shard: int) -> tuple[int, int]:
        """[start, stop) of the records of `shard`."""
        start = shard * self.shard_size
        return start, min(start + self.shard_size, self.info.records)


def owner(shard: int, process_count: int) -> int:
    """The process that writes `shard`."""
    return shard % process_count


def no_examples(path: Path, fmt: str) -> InputError:
    """The error for an input without a single record, saying what the file holds."""
    if path.stat().st_size == 0:
        what = "the file is empty"
    elif fmt == "conllu":
        what = "it holds no sentence with a token line (only blank lines or comments)"
    else:
        what = "it holds only blank lines"
    error = InputError(None, f"{path} has no examples: {what}; nothing was written")
    error.path = path
    return error


def check_has_examples(path: str | os.PathLike, fmt: str | None = None) -> None:
    """Fail fast, before a model loads or a store is created, on an input without
    records; reads only up to the first record.

    Raises:
      InputError: "<path> has no examples: ...".
    """
    path = Path(path)
    fmt = check_format(fmt or detect_format(path))
    with open(path, "rb") as f:
        if next(scan_records(f, fmt), None) is None:
            raise no_examples(path, fmt)


class _Upto:
    """A SHA-256 of the bytes up to the last record taken: `scan_records` feeds it every
    byte it reads, `take` counts them in. The bytes of the record after a --limit (read
    before the scan stops) are not, so editing or appending records past the limit never
    changes the fingerprint of a limited dump."""

    def __init__(self):
        self.sha, self.pending = hashlib.sha256(), []

    def update(self, data: bytes) -> None:
        self.pending.append(data)

    def take(self) -> None:
        for data in self.pending:
            self.sha.update(data)
        self.pending.clear()

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


def plan_shards(
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    process_index: int = 0,
    process_count: int = 1,
    limit: int | None = None,
) -> InputPlan:
    """Scan the input and keep this process's shards.

    Args:
      path: the input file.
      fmt: text, jsonl or conllu; None detects it (`detect_format`).
      shard_size: records per shard (the unit of work and of resumption).
      process_index: this process.
      process_count: processes in the job.
      limit: take only the first `limit` records (the scan stops there, so the
        fingerprint covers the bytes up to the last of them: records past it may
        change), or None for all.

    Raises:
      FileNotFoundError: no such file.
      UsageError: a bad shard size, limit or format name.
      InputError: the input has no records.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no input file {path}")
    if shard_size < 1:
        raise UsageError(f"--shard-size must be at least 1, got {shard_size}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    fmt = check_format(fmt or detect_format(path))
    digest = _Upto()
    shards: dict[int, list[RawRecord]] = {}
    count = 0
    with open(path, "rb") as f:
        for raw in scan_records(f, fmt, digest):
            if limit is not None and raw.index >= limit:
                break
            digest.take()
            shard = raw.index // shard_size
            if owner(shard, process_count) == process_index:
                shards.setdefault(shard, []).append(raw)
            count = raw.index + 1
    if limit is None or count < limit:
        digest.take()  # the whole file: its blank lines or comments after the last record
    if count == 0:
        raise no_examples(path, fmt)
    num_shards = -(-count // shard_size)
    info = InputInfo(
        name=path.name,
        format=fmt,
        sha256=digest.hexdigest(),
        size=path.stat().st_size,
        records=count,
        reader=READER,
        limit=limit,
    )
    return InputPlan(
        path=path, info=info, shard_size=shard_size, num_shards=num_shards, shards=shards
    )
