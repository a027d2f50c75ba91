"""`CaptureStream`: the captures of any number of texts, window by window, in bounded memory.

What `Engine.capture_iter` and `AttentionClient.capture_iter` return:

    stream = engine.capture_iter(open("corpus.txt"), what=("attention",),
                                 too_long="skip", progress=print_progress)
    for cap in stream:          # input order; a window of texts in flight at a time
        ...                     # drop `cap` when done: memory stays bounded
    stream.skipped, stream.truncated   # input indices, as the policy handled them

`texts` may be any iterable (a generator, an open file of lines): it is read
one window at a time, each window captured with the source's `stream`, so
peak memory is one window's captures (plus what the caller keeps), whatever
the corpus length. A window is `window` texts (the source's default when None:
enough to fill its batches). Numpy only: both sources share this.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

from jaxattn.capture import Capture
from jaxattn.errors import GenerationTooLongError, InputError, TooLongError, UsageError
from jaxattn.inputs import TOO_LONG, Text
from jaxattn.selection import is_int

Progress = Callable[[Capture | None], None]
"""Called once per input as it is handled: its Capture, or None when it was skipped."""


def too_long_policy(too_long: str | None) -> str:
    """The long-text policy `too_long` names (None: "error"); UsageError names the valid ones."""
    if too_long is None:
        return "error"
    if too_long not in TOO_LONG:
        raise UsageError(f"unknown too_long {too_long!r}: valid are {', '.join(TOO_LONG)}")
    return too_long


def _same(a: Text | None, b: Text) -> bool:
    return a == b or isinstance(a, (tuple, list)) and tuple(a) == tuple(b)


class CaptureStream(Iterator[Capture]):
    """Iterate captures of `texts` window by window (see the module doc).

    Args:
      source: anything with the `jaxattn.CaptureSource` `stream` method.
      texts: an iterable of strings or (a, b) pairs.
      window: texts per call to `source.stream` (>= 1).
      too_long: "error", "truncate" or "skip" for texts over the model's limit.
      progress: called per input with its Capture (None: skipped), or None.
      request: what, layers, heads, dtype, precision (an engine's generate, stop_at_eos):
        passed to `source.stream`.

    Attributes:
      done: inputs handled so far (captured or skipped).
      captured: captures yielded so far.
      skipped: 0-based input indices left out as too long (too_long="skip").
      truncated: input indices cut to the model's limit (too_long="truncate").
      index: the input index of the capture yielded last (-1 before the first).
    """

    def __init__(
        self,
        source,
        texts: Iterable[Text],
        *,
        window: int,
        too_long: str = "error",
        progress: Progress | None = None,
        **request,
    ):
        if isinstance(texts, (str, bytes)):
            raise UsageError(
                "texts must be an iterable of strings or (a, b) pairs, not a "
                "single string: wrap it in a list"
            )
        if not isinstance(texts, Iterable):
            raise UsageError(
                f"texts must be an iterable of strings or (a, b) pairs, got {type(texts).__name__}"
            )
        if progress is not None and not callable(progress):
            raise UsageError(
                "progress must be a function of one argument (the Capture, or None for a "
                f"skipped text), got {type(progress).__name__}"
            )
        if not is_int(window) or window < 1:
            raise UsageError(f"window must be a positive number of texts, got {window!r}")
        window = int(window)
        self.source, self.window = source, window
        self.too_long = too_long_policy(too_long)
        self.progress, self.request = progress, request
        self.done = self.captured = 0
        self.index = -1
        self.skipped: list[int] = []
        self.truncated: list[int] = []
        self._texts = iter(texts)
        self._it = self._run()

    def __next__(self) -> Capture:
        return next(self._it)

    def _run(self) -> Iterator[Capture]:
        while chunk := list(itertools.islice(self._texts, self.window)):
            start = self.done
            try:
                yield from self._window(chunk, start)
            except (InputError, UsageError) as e:  # name the text by its place in the input
                raise shifted(e, start) from None

    def _window(self, chunk: list, start: int) -> Iterator[Capture]:
        caps = self.source.stream(chunk, too_long=self.too_long, **self.request)
        pos = 0
        for cap in caps:
            # Skipped texts are missing from the stream: match by text, in order.
            while (
                self.too_long == "skip"
                and cap.text is not None
                and pos < len(chunk) - 1
                and not _same(cap.text, chunk[pos])
            ):
                self._skip(start + pos)
                pos += 1
            if cap.truncated:
                self.truncated.append(start + pos)
            self.index = start + pos
            pos += 1
            self.done += 1
            self.captured += 1
            if self.progress:
                self.progress(cap)
            yield cap
        for i in range(pos, len(chunk)):
            self._skip(start + i)

    def _skip(self, index: int) -> None:
        self.skipped.append(index)
        self.done += 1
        if self.progress:
            self.progress(None)


def shifted(error: InputError | UsageError, start: int) -> InputError | UsageError:
    """`error` about text i of a window (`index`: a bad text, or one lacking the maps'
    query/key positions), as about text start + i of the input; as it is without one."""
    if isinstance(error, GenerationTooLongError):
        return GenerationTooLongError(start + error.index, error.prompt, error.new, error.limit)
    if isinstance(error, TooLongError):
        return TooLongError(start + error.index, error.length, error.limit)
    index = getattr(error, "index", None)
    if index is None or not start:
        return error
    message = str(error).replace(f"text {index} ", f"text {start + index} ", 1)
    shifted = UsageError(message) if isinstance(error, UsageError) else InputError(None, message)
    shifted.index = start + index
    return shifted
