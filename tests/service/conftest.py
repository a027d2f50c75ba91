"""Fixtures of the service tests: one tiny real engine, in-process servers on port 0.

Compiles are the cost here (~2-6 s each on a 2-core CPU), so the engine uses
two buckets (32 and the model's 67) and batches of at most 4 (shapes 1, 2, 4),
every test sentence is under 32 tokens, and tests share a few capture specs
(mostly WHAT in float32 over 4 texts).
"""

from __future__ import annotations

import pytest
from hf_fixtures import make_checkpoint
from service_support import GENERATE_LIMIT, GatedEngine, running_server


@pytest.fixture(scope="session")
def svc_checkpoint(tmp_path_factory):
    """A tiny random BERT checkpoint (3 layers x 3 heads, D=15, max length 67)."""
    return make_checkpoint("bert", tmp_path_factory.mktemp("svc_bert"))


@pytest.fixture(scope="session")
def svc_engine(svc_checkpoint):
    import jaxattn

    return jaxattn.load(svc_checkpoint, buckets=(32,), max_batch=4)


@pytest.fixture(scope="session")
def served(svc_engine):
    """(server, address) of a shared server with small request limits."""
    with running_server(svc_engine, max_texts=64, max_tokens=1500) as s:
        yield s


@pytest.fixture(scope="session")
def address(served):
    return served[1]


@pytest.fixture
def client(address):
    from jaxattn.client import AttentionClient

    with AttentionClient(address, timeout=60.0) as c:
        yield c


@pytest.fixture
def gated(svc_engine):
    return GatedEngine(svc_engine)


@pytest.fixture(scope="session")
def svc_gpt2(tmp_path_factory):
    """The tiny random GPT-2 with its head (tests/families/gpt2_fixture.py): the decoder
    of the generation tests (64 positions)."""

    from gpt2_fixture import make_gpt2_checkpoint

    import jaxattn

    return jaxattn.load(make_gpt2_checkpoint(tmp_path_factory.mktemp("svc_gpt2")), buckets=(32,))


@pytest.fixture(scope="session")
def gpt2_address(svc_gpt2):
    """The address of a server of `svc_gpt2` generating at most GENERATE_LIMIT tokens."""
    with running_server(svc_gpt2, max_new_tokens=GENERATE_LIMIT) as (_, address):
        yield address


@pytest.fixture
def gpt2_client(gpt2_address):
    from jaxattn.client import AttentionClient

    with AttentionClient(gpt2_address, timeout=60.0) as c:
        yield c
