"""A model as a person names it: a local checkpoint directory or a Hugging Face Hub name.

    ref = parse_model("org/name@v1.0")        # checks the grammar; reads nothing
    ref.resolve()                             # Resolved(path, revision, name): downloads

The one grammar of `jaxattn.load(model, revision=...)` and of ``--model
DIR|NAME[@REVISION]`` in every command, checked in this order:

1. A str that names an existing file or directory is local, whatever it looks
   like: a local directory wins over a Hub model of the same name. An
   `os.PathLike` (a `Path`) is always local.
2. ``NAME@REVISION`` splits at the first "@": REVISION is a branch, tag or commit
   hash of the Hub model NAME. An "@" with nothing after it, or nothing before it,
   is a usage error, and so is a revision given for a local directory (it has none).
3. A name shaped like a path (absolute, starting with "." or "~", holding a
   backslash, ending with "/", or of three or more parts, a/b/c) is a local
   directory, a leading "~" the home directory as in a shell (``--model=~/x``, which
   the shell leaves as it is; "~user/x" too, and "./~/x" is a directory named "~");
   one that does not exist is a `ModelNotFoundError`, naming it as given.
4. Anything else must be a Hub name, ``NAME`` or ``ORG/NAME`` of letters, digits,
   "-", "_" and "." (no "--" or "..", at most 96 characters); else a usage error.

Nothing is read or fetched until `ModelRef.resolve` (or `os.fspath(ref)`, which
resolves once: a command that wants the model's directory gets the downloaded one).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from jaxattn.errors import ModelNotFoundError, NotAModelDirectoryError, UsageError

HUB_NAME = "NAME or ORG/NAME[@REVISION]"
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_PART}(?:/{_PART})?")
_REVISION = re.compile(r"[^\s\x00-\x1f\x7f]+")


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A model on this machine.

    Attributes:
      path: its checkpoint directory (for a Hub model, the snapshot in the
        Hugging Face cache).
      revision: the Hub commit hash it was downloaded at; "" for a local
        directory, which has no revision (its weights fingerprint still
        identifies it: `ModelInfo.weights`).
      name: the name to report (the Hub name); None keeps the checkpoint's own.
    """

    path: Path
    revision: str = ""
    name: str | None = None


@dataclasses.dataclass(eq=False)
class ModelRef(os.PathLike):
    """A parsed model name (`parse_model`): a local directory or a Hub model.

    `str(ref)` is the text as given, and a ref equals that text (``args.model ==
    "org/name"`` reads as written); `os.fspath(ref)` is the local directory,
    downloading a Hub model on first use (then kept), so code that wants the
    model's directory (``Path(args.model)``) gets the downloaded one.

    Attributes:
      text: the name as given ("org/name@v1.0").
      name: the directory, or the Hub name without the revision.
      revision: the revision asked for (Hub only), or None: the default branch.
      hub: a Hub name (True) or a local path (False).
    """

    text: str
    name: str
    revision: str | None = None
    hub: bool = False
    _resolved: Resolved | None = dataclasses.field(default=None, repr=False)

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        if isinstance(other, ModelRef):
            return (self.text, self.revision) == (other.text, other.revision)
        return self.text == other if isinstance(other, str) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __fspath__(self) -> str:
        return os.fspath(self.resolve().path)

    def resolve(self) -> Resolved:
        """The model on this machine, downloaded from the Hub the first time.

        Raises:
          ModelNotFoundError: no such directory, Hub model or revision.
          NotAModelDirectoryError: the local path is a file.
          HubError: the Hub did not deliver it (`jaxattn.checkpoints.hub`).
          CheckpointError: the Hub model is of a family jaxattn does not read.
        """
        if self._resolved is None:
            if self.hub:
                from jaxattn.checkpoints.hub import download

                path, commit = download(self.name, self.revision)
                self._resolved = Resolved(path, commit, self.name)
            else:
                path = Path(self.name)
                if not path.exists() and self.name.startswith("~"):
                    # "~/models/x", "~user/x": the home directory, as in a shell. Of the
                    # name as given: Path("./~/x") reads "~/x", and Path.expanduser raises
                    # for an unknown user (os.path's leaves the name as it is).
                    path = Path(os.path.expanduser(self.name))
                check_model_dir(path, self.name)
                self._resolved = Resolved(path)
        return self._resolved


def parse_model(model: str | os.PathLike, revision: str | None = None) -> ModelRef:
    """`model` (and `revision`) as a `ModelRef`, by the grammar of the module doc.

    Raises:
      UsageError: no string or path, an empty name, "@" without a revision or without a name, a
        revision for a local directory or path, a revision given twice, or a
        name that is neither an existing path nor a valid Hub name.
    """
    if isinstance(model, ModelRef):
        return model if revision is None else parse_model(model.text, revision)
    if not isinstance(model, (str, os.PathLike)):  # Path(3): a TypeError from pathlib
        raise UsageError(
            "the model must be a local directory or a Hugging Face Hub name (a string or a "
            f"path; None: the embedded model), got {type(model).__name__}"
        )
    if not isinstance(model, str):
        path = Path(model)
        if revision is not None:
            _no_revision(str(path), revision)
        return ModelRef(str(path), str(path))
    if not model.strip():
        raise UsageError(
            f"the model name {model!r} is empty: give a local directory or a "
            f"Hugging Face Hub name ({HUB_NAME})"
        )
    if Path(model).exists():
        if revision is not None:
            _no_revision(model, revision)
        return ModelRef(model, model)
    name, at, given = model.partition("@")
    if at:
        if not given:
            raise UsageError(
                f"{model!r} has an '@' but no revision after it: give "
                f"{name}@REVISION (a branch, tag or commit) or leave out the '@'"
            )
        if not name:
            raise UsageError(
                f"{model!r} has a revision but no model name before the '@': give {HUB_NAME}"
            )
        if revision is not None:
            raise UsageError(f"{model!r} and revision={revision!r}: give the revision once")
        revision = given
        if Path(name).exists():
            _no_revision(name, revision)
    if revision is not None and not _REVISION.fullmatch(revision):
        raise UsageError(
            f"revision {revision!r} of {name!r} is not a branch, tag or commit "
            "name (it is empty or holds spaces)"
        )
    if _is_path_shaped(name):
        if revision is not None:
            _no_revision(name, revision)
        return ModelRef(model, name)
    if not is_hub_name(name):
        raise UsageError(
            f"{model!r} is neither an existing directory nor a Hugging Face Hub name: a Hub "
            f"name is {HUB_NAME}, the names of letters, digits, '-', '_' and '.' (no '--' or "
            "'..'); a directory must exist"
        )
    return ModelRef(model, name, revision, hub=True)


def is_hub_name(name: str) -> bool:
    """Whether `name` is a valid Hub repository id (NAME or ORG/NAME)."""
    return (
        bool(_REPO_ID.fullmatch(name))
        and "--" not in name
        and ".." not in name
        and len(name) <= 96
        and not name.endswith(".git")
    )


def _is_path_shaped(name: str) -> bool:
    """Absolute, ./ ~ or a backslash, a trailing /, or three or more parts (a/b/c): a path.
    (org//name is not: neither a path nor a Hub name, a usage error.)"""
    parts = name.split("/")
    return (
        os.path.isabs(name)
        or name.startswith((".", "~"))
        or "\\" in name
        or name.endswith("/")
        or (len(parts) > 2 and all(parts))
    )


def _no_revision(path: str, revision: str) -> None:
    kind = "a local directory" if Path(path).is_dir() else "a local path"
    raise UsageError(
        f"{path!r} is {kind}, which has no revisions (revision {revision!r}): "
        "drop the revision, or name a Hub model"
    )


def check_model_dir(path: Path, shown: str | None = None) -> None:
    """Raise naming `path` (as `shown`, when given) unless it is an existing directory.

    Raises:
      ModelNotFoundError: it does not exist (also says what a checkpoint holds,
        and what a Hub name looks like).
      NotAModelDirectoryError: it is a file.
    """
    shown = str(path) if shown is None else shown
    if not path.exists():
        raise ModelNotFoundError(
            f"model directory {shown} does not exist (a checkpoint directory holds config.json, "
            "model.safetensors, model.safetensors.index.json with its shards or "
            f"pytorch_model.bin, and tokenizer files; a Hugging Face Hub name is {HUB_NAME})"
        )
    if not path.is_dir():
        raise NotAModelDirectoryError(
            f"model path {shown} is a file, not a directory: give the checkpoint's directory"
        )
