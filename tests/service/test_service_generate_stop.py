"""Why a continuation ended, on the wire (ExampleHeader.stop) and in ModelInfo.eos_ids:
an EOS that is also the N-th generated token is "eos" on the local engine, through the
server and in the CLI's --server line (the lengths alone read it as "max_new_tokens");
the server names the token ids it stops at, none where it does not generate."""

from __future__ import annotations

import dataclasses
import types

from local_server import running_server

from jaxattn.cli import main
from jaxattn.cli.generated import Served
from jaxattn.client import AttentionClient

PROMPT = "The quick brown fox"


def _eos_at_the_last_token(engine) -> tuple[int, tuple[int, ...]]:
    """(N, the first N ids of a free continuation) where the N-th id is new, so an EOS
    of that id ends the continuation there, exactly at its N-th token."""
    (free,) = engine.generate([PROMPT], 8, stop_at_eos=False)
    for n in range(3, 9):
        if free.ids[n - 1] not in free.ids[: n - 1]:
            return n, free.ids[:n]
    raise AssertionError(f"no new id among the continuation's {free.ids}")


def test_an_eos_that_is_the_last_token_is_eos_locally_and_through_the_server(
    svc_gpt2, gpt2_address, monkeypatch, capsys
):
    n, ids = _eos_at_the_last_token(svc_gpt2)
    eos = ids[-1]
    monkeypatch.setattr(svc_gpt2, "_eos_ids", (eos,))  # the served engine's too
    (gen,) = svc_gpt2.generate([PROMPT], n)
    assert gen.ids == ids and gen.stop == "eos"  # its n-th token, and the EOS
    (local,) = svc_gpt2.capture([PROMPT], generate=n, what=["attention"])
    assert local.stop == "eos" and len(local.tokens) == local.generated_start + n
    with AttentionClient(gpt2_address, timeout=60) as client:
        assert list(client.server_info().eos_ids) == [eos]
        (served,) = client.capture([PROMPT], generate=n, what=["attention"])
        (ignoring,) = client.capture([PROMPT], generate=n, stop_at_eos=False, what=["attention"])
    assert served.stop == "eos" and served.tokens == local.tokens
    assert ignoring.stop == "max_new_tokens"  # the same tokens, past the EOS
    limit = svc_gpt2.config.max_length
    assert Served.of(served, n, limit).stop == "eos"
    # a server that predates the field: the lengths alone say "max_new_tokens"
    assert Served.of(dataclasses.replace(served, stop=None), n, limit).stop == "max_new_tokens"
    assert main(["capture", PROMPT, "--server", gpt2_address, "--generate", str(n)]) == 0
    assert "stopped at an end-of-sequence token" in capsys.readouterr().out


def test_model_info_names_the_eos_ids_of_a_server_that_generates(svc_gpt2, gpt2_address, address):
    assert svc_gpt2.eos_ids  # the fixture's tokenizer names an EOS
    with AttentionClient(gpt2_address, timeout=30) as c:
        assert list(c.server_info().eos_ids) == list(svc_gpt2.eos_ids)
    with AttentionClient(address, timeout=30) as c:  # the BERT encoder's server
        info = c.server_info()
        assert info.max_new_tokens == 0 and list(info.eos_ids) == []
    with running_server(svc_gpt2, max_new_tokens=0) as (_, off):  # a decoder not generating
        with AttentionClient(off, timeout=30) as c:
            assert list(c.server_info().eos_ids) == []


def test_served_reads_the_servers_stop_before_the_lengths():
    cap = types.SimpleNamespace(tokens=("a", "b", "c", "d"), generated_start=2, stop="limit")
    assert Served.of(cap, 2, 64).stop == "limit"  # as the server says, not max_new_tokens
    assert Served.of(cap, 2, 64).tokens == ("c", "d")
    for stop, new, positions, want in (
        (None, 2, 64, "max_new_tokens"),
        (None, 3, 4, "limit"),
        (None, 3, 64, "eos"),
    ):
        cap.stop = stop
        assert Served.of(cap, new, positions).stop == want
