"""Time to the first result in a new process: load + first capture (issue 12).

    JAXATTN_COMPILATION_CACHE=$(mktemp -d) python benchmarks/first_capture.py   # cold
    (again with the same directory)                                               # cached

Captures the first N EWT dev sentences (default 100) with the full quantity set
on the embedded model (or a random BERT-base with --random-bert-base, on a GPU)
and prints the import and load
time (a random checkpoint's making apart), the first capture, a second capture
and the shapes compiled.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpu_checks import TINY


def main() -> None:
    t0 = time.perf_counter()
    import jaxattn
    from jaxattn.bench import read_sentences
    from jaxattn.bench.capture import FULL
    from jaxattn.bench.sentences import DEFAULT_CONLLU
    from jaxattn.bench.synthetic import random_checkpoint

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--conllu", type=Path, default=DEFAULT_CONLLU)
    p.add_argument("--random-bert-base", action="store_true", help="BERT-base, random weights")
    p.add_argument("--tiny", action="store_true", help="with --random-bert-base: a tiny BERT")
    p.add_argument("--what", default=",".join(FULL))
    args = p.parse_args()
    texts = read_sentences(args.conllu, args.n)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = TINY if args.tiny else {}
        model, made = None, 0.0
        if args.random_bert_base:  # not part of the figure: a real model is on disk
            t = time.perf_counter()
            model = str(random_checkpoint("bert-base", Path(tmp), **tiny))
            made = time.perf_counter() - t
        engine = jaxattn.load(model)
        t1 = time.perf_counter()
        what = tuple(args.what.split(","))
        engine.capture(texts, what=what, too_long="truncate")
        t2 = time.perf_counter()
        engine.capture(texts, what=what, too_long="truncate")
        t3 = time.perf_counter()
    print(
        f"{len(texts)} texts, {engine.info.name}: import + load {t1 - t0 - made:.1f} s "
        f"(besides making the random checkpoint, {made:.1f} s), first capture "
        f"{t2 - t1:.1f} s, second {t3 - t2:.1f} s, {engine.compiled_shapes} shapes compiled"
    )


if __name__ == "__main__":
    main()
