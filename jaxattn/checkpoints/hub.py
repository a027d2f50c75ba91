"""Models by their Hugging Face Hub name, through huggingface_hub (no HTTP of jaxattn's own).

    download("org/name", "v1.0")  -> (the snapshot directory in the cache, the commit hash)

Only what loading needs is fetched, into the user's Hugging Face cache
(``HF_HOME``, ``HF_HUB_CACHE``), with huggingface_hub's progress bars:

1. config.json alone (`snapshot_download`, which also resolves the revision to
   its commit and caches the repository's file list). A model_type jaxattn does
   not read is refused here, naming the families it reads, before any weights, and
   so is whatever else loading refuses of the config (a rope type, a size; not
   an unknown field, which the load's ignore_config_fields may vouch for).
2. Then, at that commit, each by `hf_hub_download`: the tokenizer files,
   generation_config.json where the model has one (the EOS ids generation stops
   at: `eos`), and the
   weights: model.safetensors, else model.safetensors.index.json and the shards
   it names, else pytorch_model.bin (read with ``weights_only``). Their sizes are
   checked against the cache's free space first.

``HF_TOKEN`` (or ``hf auth login``) opens gated and private models;
``HF_HUB_OFFLINE=1`` uses the cache alone; when the Hub cannot be reached, a
copy in the cache is used, as huggingface_hub does. huggingface_hub writes each
file to a temporary name and renames it into the cache only when complete (and
of the size the Hub announced), so a download cut off leaves nothing that could
be loaded. Its errors become jaxattn's, naming the model (`hub_errors`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jaxattn.checkpoints import hub_errors
from jaxattn.checkpoints.eos import GENERATION_CONFIG
from jaxattn.checkpoints.families import supported
from jaxattn.checkpoints.hf_files import (
    INDEX,
    TOKENIZER_FILES,
    TOKENIZER_NEEDS,
    WEIGHT_FILES,
    read_json_object,
    shard_names,
)
from jaxattn.errors import HubError, ModelNotFoundError

CONFIG = "config.json"


def download(repo_id: str, revision: str | None = None) -> tuple[Path, str]:
    """Download what loading the Hub model needs (or find it in the cache).

    Args:
      repo_id: the Hub name, NAME or ORG/NAME (`model_ref.is_hub_name`).
      revision: a branch, tag or commit hash; None: the default branch.

    Returns:
      (the snapshot directory in the Hugging Face cache, the commit hash).

    Raises:
      CheckpointError: its config.json is not JSON, its model_type is not one
        jaxattn reads, or it holds a value jaxattn cannot compute (before any
        weights were fetched).
      ModelNotFoundError: no such model or revision; no config.json, weights or
        tokenizer in it; offline and not (completely) in the cache.
      GatedModelError: a gated model without access (HF_TOKEN).
      HubUnreachableError: no connection, and no copy in the cache.
      HubError: a download cut off, a full disk, the Hub answering an error.
    """
    shown = f"{repo_id}@{revision}" if revision else repo_id
    snapshot = _snapshot_with_config(repo_id, revision, shown)
    commit = snapshot.name
    files, complete = _listing(repo_id, commit, snapshot)
    where = f"{shown} (commit {commit})" if complete else f"the cached copy of {shown} ({commit})"
    weights = _first(WEIGHT_FILES, files, where, "weights", complete)
    _first(TOKENIZER_NEEDS, files, where, "tokenizer", complete)
    optional = (*TOKENIZER_FILES, GENERATION_CONFIG)  # fetched where the model has them
    wanted = [f for f in optional if f in files] + [weights]
    _fetch(repo_id, commit, shown, snapshot, wanted, files)
    if weights == INDEX:
        shards = _shards(snapshot / INDEX, files, where)
        _fetch(repo_id, commit, shown, snapshot, shards, files)
    return snapshot, commit


def resolve_commit(repo_id: str, revision: str | None = None) -> str:
    """The commit hash `revision` of the Hub model names (fetching its config.json only).

    Raises: as `download`, for the config.json step.
    """
    shown = f"{repo_id}@{revision}" if revision else repo_id
    return _snapshot_with_config(repo_id, revision, shown).name


def _snapshot_with_config(repo_id: str, revision: str | None, shown: str) -> Path:
    """The snapshot directory of the commit, holding config.json of a family jaxattn reads."""
    from huggingface_hub import snapshot_download

    from jaxattn.checkpoints.hf_config import translate

    with hub_errors.translated(shown, revision):
        snapshot = Path(snapshot_download(repo_id, revision=revision, allow_patterns=[CONFIG]))
    config = snapshot / CONFIG
    if not config.is_file():
        raise ModelNotFoundError(
            f"{shown} (commit {snapshot.name}) has no config.json: it is not a Hugging Face "
            f"transformers checkpoint (jaxattn reads those of the families {supported()})"
        )
    # The whole config as loading reads it (`hf_config.translate`), so what it refuses
    # (another family, a rope type, a size) is refused before the weights are fetched.
    # Fields it does not know are left to the load, which has the caller's
    # ignore_config_fields.
    hf = read_json_object(config)
    source = f"{shown}'s config.json (nothing else was downloaded)"
    translate(hf, name=repo_id, ignore_fields=tuple(hf), source=source)
    return snapshot


def _listing(repo_id: str, commit: str, snapshot: Path) -> tuple[dict[str, int | None], bool]:
    """(the repository's files at `commit` -> size, whether that is all of them).

    huggingface_hub's listing, cached by `snapshot_download`; else, for a cache it
    did not list (offline, filled by another program), the files the snapshot
    holds, sizes unknown.
    """
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    try:
        return {f.path: f.size for f in get_cached_repo_tree(repo_id, revision=commit)}, True
    except CachedRepoTreeNotFoundError:
        held = {p.relative_to(snapshot).as_posix(): None for p in snapshot.rglob("*")}
        return {name: None for name in held if (snapshot / name).is_file()}, False


def _first(names: tuple[str, ...], files: dict, where: str, what: str, complete: bool) -> str:
    """The first of `names` the model has (ModelNotFoundError naming those looked for)."""
    found = next((n for n in names if n in files), None)
    if found is None:
        advice = "" if complete else ": connect to the Hub once to complete it"
        raise ModelNotFoundError(
            f"{where} has no {what} jaxattn reads: looked for {', '.join(names)}"
            f"{_holds(files)}{advice}"
        )
    return found


def _shards(index: Path, files: dict, where: str) -> list[str]:
    """The shard files model.safetensors.index.json names, each one the repository has."""
    shards = shard_names(index)
    missing = [s for s in shards if s not in files]
    if missing:
        raise ModelNotFoundError(
            f"{where}: {INDEX} names the shard {missing[0]}, which it does not have"
        )
    return shards


def _fetch(repo_id, commit, shown, snapshot: Path, names: list[str], files: dict) -> None:
    """Download `names` at `commit` into the snapshot (those there already cost nothing)."""
    from huggingface_hub import hf_hub_download

    missing = [n for n in names if not (snapshot / n).is_file()]
    _check_space(shown, snapshot, sum(files.get(n) or 0 for n in missing))
    for name in missing:
        with hub_errors.translated(shown, commit, file=name):
            hf_hub_download(repo_id, name, revision=commit)


def _check_space(shown: str, snapshot: Path, needed: int) -> None:
    """Refuse a download the cache's disk has no room for, before starting it."""
    if needed == 0:
        return
    free = shutil.disk_usage(snapshot).free  # the snapshot exists: config.json is in it
    if needed > free:
        cache = snapshot.parents[2]  # CACHE/models--org--name/snapshots/COMMIT
        raise HubError(
            f"not enough disk space to download {shown}: its files need {_size(needed)}, and "
            f"the Hugging Face cache {cache} has {_size(free)} free: free some space, or point "
            "HF_HUB_CACHE (or HF_HOME) at a disk with room"
        )


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _holds(files: dict) -> str:
    names = sorted(files)
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return f" (it holds {shown})" if names else ""
