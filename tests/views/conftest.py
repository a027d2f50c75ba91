"""Fixtures of the view tests: a page of the session's headless Chromium (`browser`,
tests/conftest.py), tiny captures. Helpers are in views_helpers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from views_helpers import LONG_TOKENS, is_local

WHAT = ("attention", "alpha_fx_norm", "queries", "keys")


@pytest.fixture
def page(browser):
    """A fresh page (own context) that records every request it makes in ``page.requests``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.requests = []
    pg.errors = []
    context.on("request", lambda r: pg.requests.append(r.url))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()
    assert not pg.errors, pg.errors
    assert all(is_local(u) for u in pg.requests), pg.requests


@pytest.fixture(scope="session")
def tiny_caps(engines):
    """The tiny BERT's captures of a sentence and the example pair (attention, norms, q, k)."""
    return engines["bert"].capture([EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)], what=WHAT)


@pytest.fixture(scope="session")
def tiny_html(tiny_caps, tmp_path_factory) -> Path:
    """The four views of `tiny_caps` in one file (exact float32 weights)."""
    from jaxattn.views import write_html

    path = tmp_path_factory.mktemp("views") / "tiny.html"
    write_html(path, tiny_caps, embed="float32", title="tiny BERT")
    return path


@pytest.fixture(scope="session")
def decoder_caps(tmp_path_factory) -> dict:
    """family -> (captures of two short texts, the capture of one ~1,100-token text) of the
    tiny GPT-2 (H = 3) and the tiny Llama (H = 4 query heads, H_kv = 2), both with room
    for the long text (attention, ‖αf‖, queries, keys)."""

    from gpt2_fixture import make_gpt2_checkpoint
    from hf_fixtures import load_tokenizer, long_text
    from llama_fixture import make_llama_checkpoint

    import jaxattn

    out = {}
    for name, make, room in (
        ("gpt2", make_gpt2_checkpoint, dict(n_positions=1152)),
        ("llama", make_llama_checkpoint, dict(max_position_embeddings=1152)),
    ):
        path = make(tmp_path_factory.mktemp(name), **room)
        engine = jaxattn.load(path)
        texts = [EXAMPLE_A, "The cat sat on the mat, and the cat slept."]
        short = engine.capture(texts, what=WHAT)
        (long,) = engine.capture([long_text(load_tokenizer(path), LONG_TOKENS)], what=WHAT)
        out[name] = (short, long)
    return out
