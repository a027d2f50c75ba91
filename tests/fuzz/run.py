"""Run one fuzz target under atheris (coverage-guided, libFuzzer): `scripts/fuzz.sh`.

    python tests/fuzz/run.py TARGET [libFuzzer options] [CORPUS_DIR ...]

jaxattn and service are instrumented for coverage; half the mutations are
libFuzzer's, half `harness.mutate`'s (JSON-aware, with the target's tokens). A crash (an undesigned
exception or a hang, `harness.check`) stops the run and libFuzzer writes the
input as crash-<sha1> (-artifact_prefix). The target's seeds are written into the
first corpus directory; without one, the working corpus .fuzz/corpus/TARGET (not
committed; new inputs go there) and the committed tests/fuzz/corpus/TARGET are used.
"""

from __future__ import annotations

import hashlib
import random
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]


def main(argv: list[str]) -> None:
    import atheris
    import harness

    name, rest = argv[1], argv[2:]
    with atheris.instrument_imports(include=["jaxattn", "service"]):
        target = harness.load(name)
    if not any(not a.startswith("-") for a in rest):
        # New inputs go to the first folder (a working corpus, not committed); the
        # committed one (regression inputs) is read too.
        rest.append(str(harness.HERE.parent.parent / ".fuzz" / "corpus" / name))
        if (harness.CORPUS / name).is_dir():
            rest.append(str(harness.CORPUS / name))
    first = Path(next(a for a in rest if not a.startswith("-")))
    first.mkdir(parents=True, exist_ok=True)
    for data in target.seeds():
        (first / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
    tokens, separator = tuple(getattr(target, "TOKENS", ())), getattr(target, "SEPARATOR", None)

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        """libFuzzer's mutation half the time, the harness's (JSON-aware) the other half."""
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return atheris.Mutate(data, max_size)
        return harness.mutate(data, rng, [], tokens, separator)[:max_size]

    # libFuzzer's -merge and -fork run argv[0] again through the shell: make it the
    # whole command (this interpreter, this script, the target).
    command = shlex.join([sys.executable, str(Path(__file__).resolve()), name])
    atheris.Setup(
        [command, *rest], lambda data: harness.check(target, data), custom_mutator=mutator
    )
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
