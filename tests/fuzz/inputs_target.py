"""What the three input-file targets share: read a file of one format, check its records."""

from __future__ import annotations

from harness import write

from jaxattn.errors import InputError
from jaxattn.inputs import read_records

DESIGNED = (InputError,)


def read(data: bytes, suffix: str, fmt: str | None) -> list:
    """The records of `data` as an input file named ``input<suffix>``, each checked."""
    records = list(read_records(write(f"input{suffix}", data), fmt))
    for r in records:
        texts = r.text if isinstance(r.text, tuple) else (r.text,)
        assert len(texts) in (1, 2) and all(isinstance(t, str) for t in texts), r
        assert isinstance(r.id, str) and r.line >= 1, r
        if r.sentence is not None:
            words = len(r.sentence.words)
            for dep, head, rel in r.sentence.arcs():
                assert 0 <= dep < words and 0 <= head < words and isinstance(rel, str), r
    return records
