"""`CaptureSource`: what every consumer of captures needs from an engine or a server.

`jaxattn.Engine` (a local model) and `jaxattn.client.AttentionClient` (a gRPC
server) both satisfy it, so a command, a view or an analysis written against it
works with either:

    def summarise(source: CaptureSource, texts):
        for cap in source.stream(texts, what=("attention",)):
            ...

A Protocol only: no jax; numpy comes in with `Capture`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from jaxattn.capture import Capture
from jaxattn.info import ModelInfo
from jaxattn.inputs import Text
from jaxattn.selection import Selection
from jaxattn.stream import CaptureStream, Progress


@runtime_checkable
class CaptureSource(Protocol):
    """Captures of texts, in input order, from a local engine or a server.

    The methods take the same selection as `jaxattn.Engine.capture`: quantity
    names, layers and heads (`jaxattn.selection.Selection`: indices, negative ones,
    slices; None = all), the output dtype, the long-text policy `too_long`
    ("error", "truncate", "skip"), the compute precision (None = the
    source's default, `model_info().precision`), and the query rows and key
    positions the maps keep (`query_positions`, `key_positions`: token positions,
    negative ones from each text's end; None = all), and for a decoder `generate`
    (continue each text by that many greedy tokens and capture prompt and
    continuation together; `Capture.generated_start`) with `stop_at_eos`. Every
    option after `texts` is keyword-only, so a call means the same on either source. They raise
    `jaxattn.UsageError` for a bad request and `jaxattn.InputError` for a bad
    text; a server source raises `jaxattn.ServerError` (`AttentionServiceError`)
    when the call fails. Close a source (or use it as a context manager) when
    done.
    """

    def model_info(self) -> ModelInfo:
        """The model behind the source."""
        ...

    def capture(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        precision: str | None = None,
        too_long: str | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> list[Capture]:
        """One Capture per text, in input order."""
        ...

    def stream(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        precision: str | None = None,
        too_long: str | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> Iterator[Capture]:
        """The same Captures, yielded in input order as they are ready."""
        ...

    def capture_iter(
        self,
        texts: Iterable[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        too_long: str = "error",
        precision: str | None = None,
        progress: Progress | None = None,
        window: int | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> CaptureStream:
        """Captures of any iterable of texts, window by window, in bounded memory."""
        ...

    def close(self) -> None:
        """Release what the source holds (channels; nothing for an engine)."""
        ...

    def __enter__(self) -> CaptureSource: ...

    def __exit__(self, *exc) -> None: ...
