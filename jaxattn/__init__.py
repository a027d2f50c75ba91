"""jaxattn: see inside a transformer encoder's attention.

    import jaxattn
    engine = jaxattn.load()                      # embedded all-MiniLM-L6-v2
    caps = engine.capture(["I went to the store."], what=("attention", "alpha_fx_norm"))
    caps[0].attention                            # numpy [L, H, T, T]

Public names: `load`, `Engine`, `Capture`, `CaptureSpec`, `ModelConfig`,
`QUANTITIES`, `ENCODINGS`.
"""

from jaxattn.capture import Capture
from jaxattn.encodings import ENCODINGS
from jaxattn.quantities import QUANTITIES
from jaxattn.spec import CaptureSpec

__all__ = ["Capture", "CaptureSpec", "ENCODINGS", "QUANTITIES"]
