"""The fuzz targets' shared machinery: the contract check, a deterministic mutator, replay.

A target is a module `tests/fuzz/fuzz_<name>.py` with

    DESIGNED    the exception classes the parser documents for bad input
    seeds()     a few small valid inputs (bytes), made by jaxattn itself
    one_input(data)   feed `data` to the parser; check what it returned is valid
    prepare()   (optional) the set-up `one_input` needs (a model), outside the hang clock
    TOKENS      (optional) byte strings the mutator splices in (libFuzzer's -dict)
    SEPARATOR   (optional) what separates the JSON documents of one input

`check(target, data)` runs one input: a designed error is the parser's right
answer; any other exception (IndexError, KeyError, TypeError, RecursionError,
MemoryError, ...) or an input running past `HANG_SECONDS` is a bug, raised with
the input named. `replay` is the default suite's run (the committed corpus, the
seeds, then inputs mutated from them by `mutate` with a fixed seed: the same
inputs on every machine); `tests/fuzz/run.py` runs the same targets under atheris
(coverage-guided, libFuzzer) for long campaigns (`scripts/fuzz.sh`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
TARGETS = tuple(sorted(p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py")))
# A parser that takes longer than this on one (small) input is taken to hang.
HANG_SECONDS = 10
MAX_LEN = 8192  # the largest seed (tokenizer.json) is ~5 KB

# libFuzzer's "interesting" values, as text (most parsers here read text).
_NUMBERS = (b"0", b"-1", b"1", b"255", b"65536", b"2147483648", b"-9223372036854775809")
_NUMBERS += (b"18446744073709551616", b"1e309", b"NaN", b"-0", b"1" * 5000, b"0.5")
_BYTES = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\r", b"\n", b"\t")


class Bug(AssertionError):
    """An input the parser answered with an undesigned exception or a hang."""


class _Hang(BaseException):
    pass


def load(name: str):
    """The target module `fuzz_<name>`, prepared."""
    target = importlib.import_module(f"fuzz_{name}")
    if hasattr(target, "prepare"):
        target.prepare()
    return target


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _Hang in the main thread after `seconds` (no-op off the main thread)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _Hang()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check(target, data: bytes) -> None:
    """Run one input; raise `Bug` naming it when the parser breaks its contract."""
    try:
        with _deadline(HANG_SECONDS):
            target.one_input(data)
    except target.DESIGNED:
        return
    except _Hang:
        raise Bug(f"{_name(target)} hangs (>{HANG_SECONDS} s) on {_show(data)}") from None
    except Exception as e:
        raise Bug(f"{_name(target)} raised {type(e).__name__}: {e} on {_show(data)}") from e


def _name(target) -> str:
    return target.__name__.removeprefix("fuzz_")


def _show(data: bytes) -> str:
    return repr(data) if len(data) <= 300 else f"{data[:300]!r}... ({len(data)} bytes)"


# JSON values of every kind, for a field that expects another.
_JSON = (None, True, -1, 0, 0.5, 2**64, -(2**63) - 1, 1e308, "", "x", "\ud800", [], {}, [-1])
_JSON += ([1, "a"], {"a": None}, [[[[[]]]]], "7", [2**64, 2**64])


def _json_mutant(data: bytes, rng: random.Random, separator: bytes | None) -> bytes | None:
    """`data` with one value of one of its JSON documents replaced by a value of another
    kind, or removed (None where no part is JSON)."""
    parts = data.split(separator) if separator else [data]
    k = rng.randrange(len(parts))
    try:
        doc = json.loads(parts[k])
    except (ValueError, RecursionError):
        return None
    places = []

    def walk(value, parent, key):
        if len(places) >= 5000:
            return
        places.append((parent, key))
        if isinstance(value, dict | list):
            for child_key, child in list(
                value.items() if isinstance(value, dict) else enumerate(value)
            ):
                walk(child, value, child_key)

    walk(doc, None, None)
    parent, key = rng.choice(places[1:] or places)
    if parent is None:
        doc = rng.choice(_JSON)
    elif rng.random() < 0.2:
        del parent[key]
    else:
        parent[key] = rng.choice(_JSON)
    parts[k] = json.dumps(doc).encode()
    return (separator or b"").join(parts)


def mutate(
    data: bytes, rng: random.Random, others: list[bytes], tokens=(), separator=None
) -> bytes:
    """One libFuzzer-style mutant of `data`: 1 to 4 of flip a bit, set a byte, insert
    or erase bytes, copy a piece, splice another input, put in an interesting number
    or a dictionary token, repeat a byte many times (deep nesting); or, for JSON,
    one value replaced by one of another kind (`_json_mutant`)."""
    if rng.random() < 0.3:
        mutant = _json_mutant(data, rng, separator)
        if mutant is not None:
            return mutant[:MAX_LEN]
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        pos = rng.randint(0, len(out))
        if op == 0 and out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[rng.randrange(len(out))] = rng.choice(b"\x00\xff\x7f\x80\x20\x30\x5b\x7b\x22\x09")
        elif op == 2:
            out[pos:pos] = rng.choice(_BYTES) * rng.randint(1, 3)
        elif op == 3 and out:
            del out[pos : pos + rng.randint(1, 16)]
        elif op == 4 and out:
            a = rng.randrange(len(out))
            out[pos:pos] = out[a : a + rng.randint(1, 32)]
        elif op == 5 and others:
            other = rng.choice(others)
            a = rng.randint(0, len(other))
            out[pos:] = other[a : a + rng.randint(0, 256)] + out[pos:]
        elif op == 6:
            digits = [i for i, b in enumerate(out) if 0x30 <= b <= 0x39]
            i = rng.choice(digits) if digits else pos
            j = i
            while j < len(out) and 0x30 <= out[j] <= 0x39:
                j += 1
            out[i:j] = rng.choice(_NUMBERS)
        elif op == 7 and tokens:
            out[pos:pos] = rng.choice(tokens)
        elif op == 8 and out:
            i = rng.randrange(len(out))
            out[i:i] = out[i : i + 1] * rng.choice((10, 100, 3000))
    return bytes(out[:MAX_LEN])


def corpus_files(name: str) -> list[bytes]:
    """The committed corpus of target `name` (tests/fuzz/corpus/<name>/), sorted by name."""
    folder = CORPUS / name
    return [p.read_bytes() for p in sorted(folder.iterdir())] if folder.is_dir() else []


def replay(name: str, mutants: int, seed: int = 0) -> int:
    """Check the corpus, the seeds and `mutants` mutated inputs of target `name`.

    Returns:
      How many inputs ran.
    Raises:
      Bug: the first input that breaks the contract.
    """
    target = load(name)
    inputs = corpus_files(name) + list(target.seeds())
    for data in inputs:
        check(target, data)
    rng = random.Random(f"{name}/{seed}")
    tokens, separator = tuple(getattr(target, "TOKENS", ())), getattr(target, "SEPARATOR", None)
    for _ in range(mutants):
        check(target, mutate(rng.choice(inputs), rng, inputs, tokens, separator))
    return len(inputs) + mutants


_workdir: Path | None = None


def workdir() -> Path:
    """A scratch directory for the targets' files, made once per process."""
    global _workdir
    if _workdir is None:
        _workdir = Path(tempfile.mkdtemp(prefix="jaxattn-fuzz-"))
    return _workdir


def write(name: str, data: bytes) -> Path:
    """`data` as the file `name` in the scratch directory (overwritten each input)."""
    path = workdir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


_checkpoint: Path | None = None


def use_checkpoint(path: str | os.PathLike) -> None:
    """Let the targets that need a model use this tiny checkpoint (the test session's)."""
    global _checkpoint
    _checkpoint = Path(path)


def checkpoint() -> Path:
    """A tiny BERT checkpoint: the one `use_checkpoint` named, else one made now."""
    global _checkpoint
    if _checkpoint is None:
        from hf_fixtures import make_checkpoint

        _checkpoint = make_checkpoint("bert", workdir() / "bert")
    return _checkpoint
