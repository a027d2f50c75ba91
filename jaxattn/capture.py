"""`Capture`: what the engine, the client and the store return for one example.

Numpy-only: the client builds the same objects without jax.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxattn.encodings import decode
from jaxattn.quantities import QUANTITIES


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Capture:
    """The captured tensors of one example, trimmed to its real length T.

    Every captured quantity is an attribute of the same name (``cap.attention``,
    ``cap.alpha_fx_norm``, ...): a numpy array with the axes of
    `jaxattn.quantities.QUANTITIES`. float32/float16/bfloat16 captures give the
    arrays as encoded; uint8 captures give them dequantised to float32 (the raw
    bytes stay available through `encoded`).

    Attributes:
      tokens: the word pieces, special tokens included ([CLS] ... [SEP]).
      sentence_b_start: index of the first token of sentence B, or None for a
        single sentence.
      layers: the captured layer indices (0-indexed).
      heads: the captured head indices (0-indexed).
      dtype: the output encoding.
      tensors: name -> encoded array (uint8 stays uint8).
      quantization: name -> (scale, offset) for uint8 tensors.
    """

    tokens: tuple[str, ...]
    sentence_b_start: int | None
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str
    tensors: dict[str, np.ndarray]
    quantization: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @property
    def what(self) -> tuple[str, ...]:
        """The captured quantity names."""
        return tuple(self.tensors)

    @property
    def length(self) -> int:
        """T, the example's real length in tokens."""
        return len(self.tokens)

    def encoded(self, name: str) -> tuple[np.ndarray, float | None, float | None]:
        """The raw encoded array of `name` with its uint8 (scale, offset), or Nones."""
        self._check(name)
        scale, offset = self.quantization.get(name, (None, None))
        return self.tensors[name], scale, offset

    def array(self, name: str) -> np.ndarray:
        """The decoded array of quantity `name` (same as the attribute)."""
        return decode(*self.encoded(name))

    def save(self, path, *, compress: bool = False) -> None:
        """Write this capture to one portable .npz file (see `jaxattn.capture_io`)."""
        from jaxattn import capture_io

        capture_io.save(self, path, compress=compress)

    @classmethod
    def load(cls, path) -> Capture:
        """Read a capture written by `save`."""
        from jaxattn import capture_io

        return capture_io.load(path)

    def to_bertviz(self, quantity: str = "attention", *, torch: bool | None = None) -> dict:
        """Keyword arguments for `bertviz.head_view`/`model_view` (see `jaxattn.capture_io`)."""
        from jaxattn import capture_io

        return capture_io.to_bertviz(self, quantity, torch=torch)

    def to_html(self, path=None, **options) -> str:
        """Head/model/neuron/stats views of this capture as one self-contained HTML page.

        Args:
          path: also write the page there (UTF-8) when given.
          **options: as `jaxattn.views.build_html` (views, precision, title, labels).

        Returns:
          The HTML text. In a notebook, ``jaxattn.views.View(cap)`` shows it inline.
        """
        from jaxattn import views

        html = views.build_html(self, **options)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)
        return html

    def _check(self, name: str) -> None:
        if name not in self.tensors:
            if name in QUANTITIES:
                raise AttributeError(
                    f"{name!r} was not captured; this capture holds {', '.join(self.tensors)}"
                    f" (ask for it with what=(..., {name!r}))"
                )
            raise AttributeError(
                f"Capture has no attribute {name!r}; quantities are {', '.join(QUANTITIES)}"
            )

    def __getattr__(self, name: str) -> np.ndarray:
        # Only called when normal lookup fails: quantity names resolve here.
        if name.startswith("__") or name in ("tensors", "quantization"):
            raise AttributeError(name)
        return self.array(name)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in self.tensors.items())
        return (
            f"Capture(T={self.length}, layers={list(self.layers)}, heads={list(self.heads)}, "
            f"dtype={self.dtype}, {shapes})"
        )
