"""Shared test fixtures: hermetic (no hub, no network), one tiny checkpoint per family.

`tests/` is on sys.path (pytest's rootdir-relative conftest import), so any test
module can `from hf_fixtures import make_checkpoint`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# The persistent compilation cache (on by default in ~/.cache) goes to a temp dir
# for the session: hermetic, and the CLI subprocesses reuse what the session compiled.
_XLA_CACHE = tempfile.mkdtemp(prefix="jaxattn-test-xla-")
atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
os.environ["JAXATTN_COMPILATION_CACHE"] = _XLA_CACHE
# The program cache off: many tests count the traces and compiles a capture makes, or
# patch traced code, and a program an earlier test kept would skip both.
# tests/test_program_cache.py turns it on where it tests it.
os.environ["JAXATTN_PROGRAM_CACHE"] = "off"

# Before JAX starts a backend: LLVM's optimisations off (`xla_env`: the suite's time
# is mostly compiling), here and in every process a test starts with this environment.
from xla_env import flags as _xla_flags  # noqa: E402

os.environ["XLA_FLAGS"] = _xla_flags()

# Before transformers / huggingface_hub are imported anywhere: never reach a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from hf_fixtures import (  # noqa: E402
    EXAMPLE_A,
    EXAMPLE_B,
    FAMILIES,
    long_text,
    make_checkpoint,
    torch_inputs,
    torch_reference,
)

from jaxattn.quantities import COMMON  # noqa: E402  (numpy-free)
from jaxattn.views.png import FLAGS  # noqa: E402


class _Lazy(dict):
    """A dict that builds a missing family's value on first use."""

    def __init__(self, build):
        super().__init__()
        self._build = build

    def __missing__(self, key):
        self[key] = value = self._build(key)
        return value


@pytest.fixture(scope="session")
def checkpoint_dirs(tmp_path_factory) -> dict:
    """family -> a lazily built tiny HF checkpoint dir (safetensors, seed 0)."""
    return _Lazy(lambda family: make_checkpoint(family, tmp_path_factory.mktemp(f"hf_{family}")))


@pytest.fixture(scope="session")
def bert_checkpoint(checkpoint_dirs):
    """A tiny random BERT checkpoint dir (D=15, 3 layers x 3 heads, max length 67)."""
    return checkpoint_dirs["bert"]


@pytest.fixture(scope="session")
def roberta_checkpoint(checkpoint_dirs):
    """A tiny random RoBERTa checkpoint dir (D=21, 3 layers x 3 heads, max length 67)."""
    return checkpoint_dirs["roberta"]


@pytest.fixture(scope="session")
def distilbert_checkpoint(checkpoint_dirs):
    """A tiny random DistilBERT checkpoint dir (D=15, 3 layers x 5 heads, max length 67)."""
    return checkpoint_dirs["distilbert"]


@pytest.fixture(scope="session")
def engines(checkpoint_dirs) -> dict:
    """family -> a jaxattn Engine of that family's checkpoint, loaded once per session."""
    import jaxattn

    return _Lazy(lambda family: jaxattn.load(checkpoint_dirs[family]))


@pytest.fixture(scope="session")
def torch_models(checkpoint_dirs) -> dict:
    """family -> the eager PyTorch reference model of that family's checkpoint."""
    from hf_fixtures import load_torch_model

    return _Lazy(lambda family: load_torch_model(checkpoint_dirs[family]))


@pytest.fixture(scope="session")
def tokenizers(checkpoint_dirs) -> dict:
    """family -> the HF tokenizer of that family's checkpoint."""
    from hf_fixtures import load_tokenizer

    return _Lazy(lambda family: load_tokenizer(checkpoint_dirs[family]))


@pytest.fixture(params=FAMILIES)
def family(request) -> str:
    """Parametrises a test over bert, roberta and distilbert."""
    return request.param


@pytest.fixture(scope="session")
def standard_texts(tokenizers) -> dict:
    """family -> texts of very different lengths for one capture call.

    A single sentence (T=8 for BERT), "" ([CLS] [SEP], padded to the first's
    bucket in the same batch), the example pair (T=19) and a 22-24 token
    sentence (padded with the pair). Two (bucket, batch) shapes in all: every
    shape costs a few seconds of compilation on the 2-core machine.
    """

    def build(family):
        texts = [EXAMPLE_A, "", (EXAMPLE_A, EXAMPLE_B), long_text(tokenizers[family], 22)]
        assert len(tokenizers[family](texts[-1])["input_ids"]) <= 24
        return texts

    return _Lazy(build)


@pytest.fixture(scope="session")
def full_captures(engines, standard_texts) -> dict:
    """family -> the engine's captures of every quantity for `standard_texts`, one call.

    Every quantity every model computes (COMMON) at once: one capture spec shared by
    the parity, norm and invariant tests, so the session compiles each (bucket, batch)
    shape once."""
    return _Lazy(lambda fam: engines[fam].capture(standard_texts[fam], what=COMMON))


@pytest.fixture(scope="session")
def references(torch_models, tokenizers, standard_texts) -> dict:
    """family -> per standard text, the eager torch reference run on that text alone.

    Each entry is `hf_fixtures.torch_reference`'s dict without the batch axis.
    """

    def build(family):
        out = []
        for text in standard_texts[family]:
            enc = torch_inputs(tokenizers[family], [text], family)
            ref = torch_reference(torch_models[family], family, enc)
            out.append({k: v[0] for k, v in ref.items()})
        return out

    return _Lazy(build)


# -- the browser ---------------------------------------------------------------------
# One headless system Chromium per session (per test worker), shared by the views'
# and the notebook's tests: Debian's (`apt-get install chromium`), driven by
# Playwright's Python package with `executable_path` (never `playwright install`).
# One only: a second sync_playwright() while the first is open is refused ("Sync API
# inside the asyncio loop"). Without either, browser tests fail with the install hint
# when $CI is set, and skip otherwise.
CHROMIUM_ARGS = list(FLAGS)  # the static exports' quiet, offline browser (views/png.py)
INSTALL_HINT = (
    "apt-get install -y chromium && pip install playwright (the system browser is used; "
    "never `playwright install`)"
)


def _browser_unavailable(why: str):
    msg = f"browser tests need {why}: {INSTALL_HINT}"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (the system binary), shared by the session."""
    from jaxattn.views.png import find_chromium

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _browser_unavailable("the playwright Python package")
    path = find_chromium()
    if path is None:
        _browser_unavailable("a Chromium binary")
    with sync_playwright() as p:
        # Playwright gives every launch a fresh temporary profile (user-data dir).
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def copy_threads(monkeypatch) -> list[str]:
    """Large host copies (`jaxattn.capture.bulk`) taken by a pool of 3 threads of its own
    from a few KiB on, in pieces of 1 KiB: the name of the thread that copied each piece
    (the pool's start "jaxattn-copy"), in the list returned."""
    import threading

    from jaxattn.capture import bulk

    monkeypatch.setattr(bulk, "POOL_MIN", 1 << 12)
    monkeypatch.setattr(bulk, "PIECE_BYTES", 1 << 10)
    monkeypatch.setattr(bulk, "ALIGN", 1 << 8)
    threads: list[str] = []
    drain = bulk._drain

    def recorded(todo):
        n = drain(todo)
        threads.extend([threading.current_thread().name] * n)
        return n

    monkeypatch.setattr(bulk, "_drain", recorded)
    executor = bulk.concurrent.futures.ThreadPoolExecutor(3, thread_name_prefix="jaxattn-copy")
    monkeypatch.setattr(bulk, "_pool", executor)
    monkeypatch.setattr(bulk, "_pool_threads", 3)
    yield threads
    executor.shutdown()


@pytest.fixture
def pinned_pool_gb(monkeypatch):
    """Sets XLA's pinned host pool to the GiB it is called with, as XLA takes it: the
    variable set before jax's backend started (`jaxattn.engine.host.POOL` keeps that
    value; the variable set now, in a backend already running, XLA would not see)."""
    from jaxattn.engine import host

    def set_pool(gib: int) -> None:
        monkeypatch.setenv(host.POOL_LIMIT_ENV, str(gib))
        monkeypatch.setattr(host.POOL, "started_gb", gib)

    return set_pool
