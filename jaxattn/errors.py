"""jaxattn's own errors: one base class, one subclass per kind of problem.

Pure Python and the innermost room: every part of jaxattn (and a client-only
install) raises these, and the CLI turns them into one line and an exit code.

    JaxattnError                     base: catch it to catch everything jaxattn says
    +-- UsageError (ValueError)      a bad argument, option value or combination   exit 2
    +-- InputError (ValueError)      a bad text or input file (names file and line) exit 1
    |   +-- TooLongError             a text over the model's maximum length        exit 1
    |       +-- GenerationTooLongError  a prompt + new tokens over it (generate)   exit 2
    +-- CheckpointError (ValueError) an unreadable or inconsistent model checkpoint exit 1
    +-- ModelNotFoundError           no such model directory, file in it, Hub      exit 2
    |     (FileNotFoundError)        model or revision (offline: none cached)
    +-- NotAModelDirectoryError      a model path that is a file                   exit 2
    |     (NotADirectoryError)
    +-- HubError (OSError)           the Hugging Face Hub did not deliver a model  exit 1
    |   +-- HubUnreachableError      no connection to the Hub, and no cached copy  exit 1
    |   |     (ConnectionError)
    |   +-- GatedModelError          a gated or private model, without access      exit 1
    |         (PermissionError)
    +-- CaptureFileError (ValueError) an unreadable capture file or store          exit 1
    +-- ServerError                  a failed call to a server (status code)       exit 1
    +-- DeviceMemoryError            one example does not fit the device's memory  exit 1
    |     (or a model's weights, at load)
    +-- HostMemoryError (MemoryError) a call's results do not fit the host's memory exit 1
          (XLA's pinned host pool, or the host's available memory; or a model, at load)

The ValueError bases keep ``except ValueError`` working for callers that
validated input that way, and the OSError ones the built-in class Python code
expects of a missing file or a failed download. Messages name the file, tensor,
field, index or model and, where there is one, what to do instead; `cli_message`
words the same advice in command-line terms (``--too-long truncate``, not
``too_long="truncate"``). docs/errors.md lists them with what to do.
"""

from __future__ import annotations

from typing import NamedTuple


class Advice(NamedTuple):
    """What to do about an error, in each set of terms a user meets it in."""

    wire: str  # a CaptureRequest's fields: the server's message (service/requests.py)
    python: str  # the Python API's arguments: the engine's and the client's errors
    flags: str  # the command line's flags: `cli_message`, the CLI's report of a server's
    page: str  # the live viewer's (`jaxattn web`): what the person at the page can do


TOO_LONG_ADVICE = Advice(
    "set truncate in CaptureRequest to cut it",
    "cut it with too_long='truncate' or leave it out with too_long='skip'",
    "cut it with --too-long truncate or leave it out with --too-long skip",
    "shorten it",
)
GENERATION_TOO_LONG_ADVICE = Advice(
    "set truncate in CaptureRequest to generate until the positions are full, "
    "or ask fewer new tokens",
    "ask for fewer new tokens (generate=), generate until the positions are full "
    "with too_long='truncate', or leave it out with too_long='skip'",
    "ask for fewer new tokens (--generate), generate until the positions are full "
    "with --too-long truncate, or leave it out with --too-long skip",
    "ask for fewer new tokens",
)
# Every advice a server's message may carry (`jaxattn.client.errors.in_terms`).
ADVICE = (TOO_LONG_ADVICE, GENERATION_TOO_LONG_ADVICE)


def in_terms(message: str, terms: str, given: str = "wire") -> str:
    """`message` with its advice (one of `ADVICE`, in the `given` terms: a server's
    "wire") put in other terms: "python" (the client's arguments), "flags" (the command
    line's) or "page" (the live viewer's)."""
    for advice in ADVICE:
        message = message.replace(getattr(advice, given), getattr(advice, terms))
    return message


class JaxattnError(Exception):
    """Base of the errors jaxattn raises itself, with a message meant for the user."""

    # The CLI's exit code for this kind of error (`jaxattn.cli`).
    exit_code = 1

    def cli_message(self) -> str:
        """The message in command-line terms (flags, not keyword arguments)."""
        return str(self)


class UsageError(JaxattnError, ValueError):
    """A bad argument: an unknown name, an index out of range, options that exclude
    each other, an output that exists. Fix the call (or the command line)."""

    exit_code = 2


class InputError(JaxattnError, ValueError):
    """A bad input text or input file: not UTF-8, malformed, empty.

    Attributes:
      line: the 1-based line of the problem in `path`, or None.
      reason: what is wrong, without the place.
      path: the input file, or None for texts given directly.
    """

    def __init__(self, line: int | None, reason: str, path=None):
        where = f"{path}:{line}" if path and line else str(path) if path else f"line {line}"
        super().__init__(f"{where}: {reason}" if (path or line) else reason)
        self.line, self.reason, self.path = line, reason, path


class TooLongError(InputError):
    """A text over the model's maximum length, under the policy ``too_long="error"``.

    Attributes:
      index: the text's 0-based position in the call's texts.
      length: its length in tokens, special tokens included.
      limit: the model's maximum.
    """

    advice = TOO_LONG_ADVICE

    def __init__(self, index: int, length: int, limit: int):
        self.index, self.length, self.limit = index, length, limit
        super().__init__(None, f"{self.summary}: {self.advice.python}")

    @property
    def summary(self) -> str:
        """What is wrong, without the advice (for a page or a server to add its own)."""
        return (
            f"text {self.index} is {self.length} tokens long, over the model's limit of "
            f"{self.limit} tokens"
        )

    def cli_message(self) -> str:
        return f"{self.summary}: {self.advice.flags}"


class GenerationTooLongError(TooLongError):
    """A prompt whose tokens and the new tokens asked for exceed the model's positions
    (`jaxattn.Engine.generate` under ``too_long="error"``).

    Attributes:
      index, limit: as `TooLongError`; length: prompt + new tokens.
      prompt: the prompt's length in tokens; new: the new tokens asked for.
    """

    exit_code = 2  # the text fits: the number of new tokens asked for is what is wrong
    advice = GENERATION_TOO_LONG_ADVICE

    def __init__(self, index: int, prompt: int, new: int, limit: int):
        self.prompt, self.new = prompt, new
        super().__init__(index, prompt + new, limit)

    @property
    def summary(self) -> str:
        return (
            f"text {self.index}: its {self.prompt} prompt tokens + {self.new} new tokens = "
            f"{self.prompt + self.new}, over the model's limit of {self.limit} positions"
        )


class CheckpointError(JaxattnError, ValueError):
    """A model checkpoint that cannot be read or does not fit together: a corrupt weights
    file, a broken config.json, a tensor whose shape the config contradicts. The message
    names the file or tensor (and both shapes)."""


class CaptureFileError(JaxattnError, ValueError):
    """A saved capture (.npz) or a store that cannot be read: not one, damaged, or of a
    format this jaxattn does not read (the message says which format it found).

    Args:
      message: the message, in the Python API's terms.
      cli: the same in command-line terms, where its advice differs (`cli_message`).
    """

    def __init__(self, message: str = "", *, cli: str | None = None):
        super().__init__(message)
        self.cli = cli

    def cli_message(self) -> str:
        return self.cli or str(self)


class ServerError(JaxattnError):
    """A call to a jaxattn server failed (`jaxattn.client.AttentionServiceError`)."""


class DeviceMemoryError(JaxattnError):
    """One example does not fit the device's memory, even in a batch of its own; or a
    model's weights do not, at load (`jaxattn.checkpoints.loading.out_of_memory`)."""


class HostMemoryError(JaxattnError, MemoryError):
    """A call's results do not fit the host's memory: they fill XLA's pool of pinned host
    memory, which running in smaller batches cannot free, or they come to more than the
    host's available memory (refused before any capture runs). The message names the bytes,
    the pool's size and its variable (XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB), and how to take
    results as they come instead (capture_iter, stream, dump). Or the host ran out
    loading a model (`jaxattn.checkpoints.loading.out_of_memory`). A MemoryError too, as
    Python code expects."""


class ModelNotFoundError(JaxattnError, FileNotFoundError):
    """No model where the name points: no such local directory, or one that lacks a file
    loading needs; no such model or revision on the Hugging Face Hub; or, with
    HF_HUB_OFFLINE=1, no copy in the Hugging Face cache. The message names the model and
    what was looked for. A FileNotFoundError too, as Python code expects."""

    exit_code = 2


class NotAModelDirectoryError(JaxattnError, NotADirectoryError):
    """A model path that is a file: a checkpoint is a directory (names the path)."""

    exit_code = 2


class HubError(JaxattnError, OSError):
    """The Hugging Face Hub did not deliver a model: a download cut off, a full disk, an
    answer the Hub gives when it is down. Nothing half-written is kept (huggingface_hub
    renames a file into its cache only once complete), so running again is safe."""


class HubUnreachableError(HubError, ConnectionError):
    """The Hub cannot be reached (no network, a wrong HF_ENDPOINT) and the Hugging Face
    cache has no copy of the model."""


class GatedModelError(HubError, PermissionError):
    """A gated model whose conditions the account of the token in use (HF_TOKEN) has not
    accepted, or no token at all."""
