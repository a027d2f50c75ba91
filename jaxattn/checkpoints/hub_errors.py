"""huggingface_hub's errors as jaxattn's: one line, naming the model (and file), with what to do.

    with translated("org/name@v1.0", "v1.0", file="model.safetensors"):
        hf_hub_download(...)

    repository not found (404, or 401 to an anonymous caller)  ModelNotFoundError
    revision not found                                         ModelNotFoundError
    HF_HUB_OFFLINE=1 and not (all) in the cache                ModelNotFoundError
    gated, no token or no access (401/403)                     GatedModelError
    no connection and no cached copy                           HubUnreachableError
    a download cut off, a full disk, the Hub answering 5xx     HubError

Anything else (a bug, a new kind of failure) is left as it is.
"""

from __future__ import annotations

import contextlib
import errno
import os

from jaxattn.errors import (
    GatedModelError,
    HubError,
    HubUnreachableError,
    JaxattnError,
    ModelNotFoundError,
)

# Modules whose exceptions are a transfer failing (connection, timeout, protocol).
_NETWORK_MODULES = ("httpx", "httpx2", "httpcore", "requests", "urllib3")


@contextlib.contextmanager
def translated(shown: str, revision: str | None, *, file: str | None = None):
    """Raise huggingface_hub's errors inside as jaxattn's (`translate`)."""
    try:
        yield
    except JaxattnError:
        raise
    except Exception as e:
        error = translate(e, shown, revision, file)
        if error is None:
            raise
        raise error from e


def translate(error: Exception, shown: str, revision: str | None, file: str | None = None):
    """The jaxattn error for `error`, met fetching `file` (None: config.json, first) of the
    Hub model `shown` ("NAME" or "NAME@REVISION"); None when it is none of the known kinds."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        DisabledRepoError,
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    name = shown.partition("@")[0]
    cache = constants.HF_HUB_CACHE
    what = f"{file} of {shown}" if file else shown
    if isinstance(error, GatedRepoError):
        return GatedModelError(_gated(name, shown, constants.ENDPOINT))
    if isinstance(error, RevisionNotFoundError):
        return ModelNotFoundError(
            f"{name} has no revision {revision!r} on the Hub: give a branch, tag or commit "
            f"hash it has ({name}@REVISION), or none for its default branch"
        )
    if isinstance(error, RepositoryNotFoundError):
        return ModelNotFoundError(_not_found(shown, constants.ENDPOINT))
    if isinstance(error, DisabledRepoError):
        return ModelNotFoundError(f"{shown} is disabled on the Hub: it cannot be downloaded")
    if isinstance(error, LocalEntryNotFoundError | OfflineModeIsEnabled):
        if constants.is_offline_mode():
            return ModelNotFoundError(_offline(shown, file, cache))
        return HubUnreachableError(_unreachable(shown, file, cache, error))
    if isinstance(error, EntryNotFoundError):
        return ModelNotFoundError(f"{shown} has no {file or 'config.json'} on the Hub")
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return HubError(
            f"the disk filled up downloading {what} into {cache}: nothing half-written was "
            "kept; free some space, or point HF_HUB_CACHE (or HF_HOME) at a disk with room"
        )
    if isinstance(error, HfHubHTTPError):
        status = getattr(error.response, "status_code", "an error")
        return HubError(f"the Hub answered {status} for {what}: {_reason(error)}; try again later")
    if isinstance(error, OSError) and error.errno is not None:
        return HubError(
            f"cannot write {what} into the Hugging Face cache {cache} ({_reason(error)}): make "
            "it writable, or point HF_HUB_CACHE (or HF_HOME) elsewhere"
        )
    if _is_network(error) and file is None:  # before any file: the Hub, not a download
        return HubUnreachableError(_unreachable(shown, None, cache, error))
    if _is_network(error) or isinstance(error, OSError):  # OSError: shorter than announced
        return HubError(
            f"the download of {file or 'config.json'} of {shown} was cut off ({_reason(error)}): "
            "nothing half-written was kept; run the command again to download it"
        )
    return None


def _gated(name: str, shown: str, endpoint: str) -> str:
    from huggingface_hub import get_token

    page = f"{endpoint}/{name}"
    if get_token():
        return (
            f"{shown} is a gated model and the token in use (HF_TOKEN, or `hf auth login`) has "
            f"no access to it: accept its conditions at {page} with that token's account"
        )
    return (
        f"{shown} is a gated model: accept its conditions at {page}, then set HF_TOKEN to a "
        "token of that account (none is set)"
    )


def _not_found(shown: str, endpoint: str) -> str:
    from huggingface_hub import get_token

    private = (
        "a private model needs HF_TOKEN, and the token in use has no access to it"
        if get_token()
        else "a private model needs HF_TOKEN (none is set)"
    )
    return (
        f"{shown} is neither a local directory nor a model on the Hugging Face Hub "
        f"({endpoint}): check the name; {private}"
    )


def _offline(shown: str, file: str | None, cache: str) -> str:
    var = _offline_variable()
    if file:
        return (
            f"the cached copy of {shown} lacks {file}, and {var}=1 forbids downloading it: "
            f"unset {var} once to complete it"
        )
    return (
        f"{shown} is neither a local directory nor in the Hugging Face cache ({cache}), and "
        f"{var}=1 forbids downloading it: unset {var}, or give a local directory"
    )


def _offline_variable() -> str:
    """The variable that put huggingface_hub offline (it reads either)."""
    value = os.environ.get("HF_HUB_OFFLINE", "").upper()
    return "HF_HUB_OFFLINE" if value in ("1", "ON", "YES", "TRUE") else "TRANSFORMERS_OFFLINE"


def _unreachable(shown: str, file: str | None, cache: str, error: BaseException) -> str:
    chain = [error]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) and len(chain) < 8:
        chain.append(nxt)
    cause = next((e for e in chain if _module(e) in _NETWORK_MODULES), chain[-1])
    held = f"the cached copy lacks {file}" if file else f"the cache ({cache}) has no copy of it"
    return (
        f"cannot reach the Hub for {shown} ({_reason(cause)}), and {held}: check the network "
        "(and HF_ENDPOINT), or give a local directory; HF_HUB_OFFLINE=1 uses the cache alone"
    )


def _is_network(error: BaseException) -> bool:
    """A transfer that failed (connection, timeout, protocol), or an error it caused."""
    return any(_module(e) in _NETWORK_MODULES for e in (error, error.__cause__) if e)


def _module(error: BaseException) -> str:
    return type(error).__module__.split(".")[0]


def _reason(error: BaseException) -> str:
    """The first line of an error's message, short, or its class name."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."
