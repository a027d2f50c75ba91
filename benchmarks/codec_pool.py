"""Compressed chunks on the shared pool against compressed inline (`jaxattn.wire.codec_pool`).

    .venv/bin/python benchmarks/codec_pool.py [--texts N] [--repeats R]

The server's encode alone (`serialize_example`, zstd, no gRPC) of the embedded
all-MiniLM-L6-v2's captures of N EWT dev texts of ~100 words: a float32 full capture
and uint8 attention (three times the texts: its examples are small), for each piece
size (`codec_pool.PIECE_BYTES`), with the pool (pieces of `POOL_MIN` and more on
its threads) and inline (every piece where it is taken, as before the pool):
decoded GB/s (best of R) and the bytes on the wire.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service_bench as sb  # noqa: E402 (a script beside this one)

PIECES = (4 << 20, 2 << 20, 1 << 20, 512 << 10, 256 << 10)


def main(argv=None) -> int:
    import jaxattn
    from jaxattn.bench.capture import FULL
    from jaxattn.wire import codec_pool
    from jaxattn.wire.codecs import DEFAULT_MAX_CHUNK_BYTES
    from jaxattn.wire.send import serialize_example

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=40)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    texts = sb.long_texts(sb.sentences(sb.CONLLU), args.texts)
    engine = jaxattn.load(None)
    pool_min = codec_pool.POOL_MIN
    for label, caps in (
        ("float32 full capture", engine.capture(texts, what=FULL, dtype="float32")),
        ("uint8 attention", engine.capture(texts * 3, what="attention", dtype="uint8")),
    ):
        raw = sum(a.nbytes for c in caps for a in c.tensors.values())
        for piece in PIECES:
            for mode in ("inline", "pool"):
                codec_pool.PIECE_BYTES = piece
                codec_pool.POOL_MIN = (1 << 60) if mode == "inline" else pool_min
                best, wire = float("inf"), 0
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    wire = sum(
                        len(m)
                        for i, c in enumerate(caps)
                        for m in serialize_example(
                            i, c, codec="zstd", max_chunk_bytes=DEFAULT_MAX_CHUNK_BYTES
                        )
                    )
                    best = min(best, time.perf_counter() - start)
                print(
                    f"{label}, pieces of {piece >> 10} KiB, {mode}: {raw / best / 1e9:.2f} "
                    f"GB/s decoded, {wire / 1e6:.1f} MB on the wire of {raw / 1e6:.0f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
