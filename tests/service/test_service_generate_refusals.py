"""Generation through the service (CaptureRequest.generate), its limits: a real server on
port 0 with the tiny random GPT-2; its refusals with their status, field and limit
(over max_new_tokens, a model that cannot generate, prompt + new tokens over the
positions, the worst case against max_tokens); truncate and skip; the client's checks
before sending; an old server that ignores the field."""

from __future__ import annotations

import grpc
import pytest
from generate_support import PROMPTS
from llama_fixture import make_llama_checkpoint  # noqa: E402
from local_server import fake_service, running_server
from service_support import GENERATE_LIMIT, assert_same_captures

import jaxattn
from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import serialize_example

NEW = 5
LIMIT = GENERATE_LIMIT  # the server's --max-new-tokens
INVALID, EXHAUSTED = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED


def _long(engine) -> tuple[str, int]:
    """A text that fits the model's 64 positions alone, not with LIMIT new tokens."""
    words = []
    while (n := engine.tokenize([" ".join(words)])[0].length) < 64 - LIMIT + 3:
        words.append("fox")
    assert n + LIMIT > 64 > n
    return " ".join(words), n


def test_model_info_names_the_limit_and_an_encoder_or_headless_decoder_cannot_generate(
    gpt2_client, tmp_path, svc_engine
):
    assert gpt2_client.server_info().max_new_tokens == LIMIT
    headless = jaxattn.load(make_llama_checkpoint(tmp_path, lm_head=False), buckets=(32,))
    for engine, why in ((svc_engine, "is an encoder"), (headless, "has no next-token head")):
        with running_server(engine) as (_, address), AttentionClient(address, timeout=30) as c:
            assert c.server_info().max_new_tokens == 0
            with pytest.raises(AttentionServiceError) as e:
                c.capture(["hello world"], generate=2)
            assert e.value.code == INVALID and e.value.field == "generate"
            assert why in e.value.message


def test_refusals_name_the_field_and_the_limit(svc_gpt2, gpt2_client):
    with pytest.raises(AttentionServiceError) as e:
        gpt2_client.capture(PROMPTS, generate=LIMIT + 1)
    assert (e.value.code, e.value.field, e.value.limit) == (EXHAUSTED, "generate", "max_new_tokens")
    assert f"at most {LIMIT}" in e.value.message
    # prompt + new tokens over the model's 64 positions: the text, as too_long
    long, n = _long(svc_gpt2)
    with pytest.raises(AttentionServiceError) as e:
        gpt2_client.capture(["a", long], generate=LIMIT)
    assert (e.value.code, e.value.field) == (INVALID, "texts[1]")
    assert f"{n} prompt tokens + generate {LIMIT} new tokens = {n + LIMIT}" in e.value.message
    assert "set truncate" in e.value.message


def test_an_encoder_statistic_asked_of_a_decoder_server_says_what_to_ask_instead(gpt2_client):
    """As the local engine says it (was: 'is not computed by this model', and the list)."""
    with pytest.raises(AttentionServiceError) as e:
        gpt2_client.capture(["a b"], what=("attention", "head_stats"))
    assert (e.value.code, e.value.field) == (INVALID, "what[1]")
    assert "what[1] 'head_stats' is not computed for a decoder (causal) model" in e.value.message
    assert "ask for decoder_head_stats" in e.value.message


def test_an_empty_prompt_is_refused_naming_the_text(gpt2_client):
    # GPT-2 adds no BOS: nothing to continue (it failed in the worker: INTERNAL)
    with pytest.raises(AttentionServiceError) as e:
        gpt2_client.capture(["a", ""], generate=2)
    assert (e.value.code, e.value.field) == (INVALID, "texts[1]")
    assert "text 1 is empty" in e.value.message


def test_truncate_generates_until_the_positions_are_full_and_skip_drops_the_text(
    svc_gpt2, gpt2_client
):
    long, n = _long(svc_gpt2)
    kw = dict(what=["attention"], generate=LIMIT, stop_at_eos=False)
    got = gpt2_client.capture(["a", long], too_long="truncate", **kw)
    assert_same_captures(got, svc_gpt2.capture(["a", long], too_long="truncate", **kw))
    assert got[1].generated_start == n and len(got[1].tokens) == 64 and not got[1].truncated
    assert [c.stop for c in got] == ["max_new_tokens", "limit"]  # "a" had all LIMIT tokens
    skipped = gpt2_client.capture(["a", long], too_long="skip", **kw)
    assert_same_captures(skipped, svc_gpt2.capture(["a", long], too_long="skip", **kw))
    assert len(skipped) == 1


def test_the_worst_case_counts_against_the_servers_token_limit(svc_gpt2):
    n = sum(e.length for e in svc_gpt2.tokenize(PROMPTS))
    with running_server(svc_gpt2, max_tokens=n + 3 * NEW - 1) as (_, address):
        with AttentionClient(address, timeout=30) as c:
            c.capture(PROMPTS)  # the prompts alone fit
            with pytest.raises(AttentionServiceError) as e:
                c.capture(PROMPTS, generate=NEW)  # prompt + NEW each, even if EOS comes first
            assert (e.value.code, e.value.limit) == (EXHAUSTED, "max_tokens")


def test_ignore_eos_without_generate_is_refused_on_the_wire(gpt2_address):
    request = pb.CaptureRequest(texts=[pb.Text(text="a")], ignore_eos=True)
    with grpc.insecure_channel(gpt2_address) as channel:
        call = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=pb.CaptureRequest.SerializeToString,
            response_deserializer=pb.CaptureResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as e:
            list(call(request, timeout=30))
    assert e.value.code() == INVALID
    assert dict(e.value.trailing_metadata())["jaxattn-field"] == "ignore_eos"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(generate=0), "generate must be at least 1, got 0"),
        (dict(generate=-2), "generate must be at least 1, got -2"),
        (dict(generate=2.0), "generate must be a whole number, got 2.0"),
        (dict(stop_at_eos=False), "stop_at_eos=False applies to generate"),
        (dict(generate=2, stop_at_eos="no"), "stop_at_eos must be True or False, got 'no'"),
    ],
)
def test_the_client_checks_before_sending(kwargs, message):
    with AttentionClient("127.0.0.1:1", timeout=5) as c:  # nothing listens: no call is made
        with pytest.raises(UsageError) as e:
            c.capture(["a"], **kwargs)
    assert str(e.value).startswith(message)  # the argument the caller gave, by its name


def test_a_server_that_ignores_generate_is_refused(svc_gpt2):
    """An old server captures the texts alone (no generated_start): UNIMPLEMENTED."""
    cap = svc_gpt2.capture(["a"])[0]

    def capture(request, context):
        yield from serialize_example(0, cap, codec="none", max_chunk_bytes=1 << 20)

    def info(request, context):
        return pb.ModelInfo(name="old", layers=3, heads=3, max_positions=64)

    with fake_service(capture, info) as address, AttentionClient(address, timeout=10) as c:
        with pytest.raises(AttentionServiceError) as e:
            c.capture(["a"], generate=2)
    assert e.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert "predates generate" in e.value.message


def test_positions_must_fit_every_length_the_continuation_may_end_at(svc_gpt2, gpt2_client):
    """Positions 4 and -3 name two tokens of a 9-token example, one of a 7-token one: a
    prompt of n tokens with up to 5 new ones, ending at EOS, may end anywhere from n + 1."""
    n = svc_gpt2.tokenize([PROMPTS[0]])[0].length
    p, j = n, 3  # both name token n of an example of n + j tokens
    assert n + 1 < n + j <= n + NEW and p < n + 1 and j <= n + 1  # fine at its shortest
    kw = dict(what=["attention"], generate=NEW, query_positions=[p, -j])
    with pytest.raises(AttentionServiceError) as e:
        gpt2_client.capture(PROMPTS[:1], **kw)
    assert (e.value.code, e.value.field) == (INVALID, "query_positions[1]")
    assert f"texts[0] with its continuation ({n + j} tokens)" in e.value.message
    # generating all NEW tokens (ignore_eos), every example has n + NEW: no clash
    got = gpt2_client.capture(PROMPTS[:1], stop_at_eos=False, **kw)
    assert got[0].query_positions == (p, n + NEW - j)


def test_a_generation_is_charged_the_tokens_of_every_forward_it_may_run(svc_gpt2, tmp_path):
    """tokens_per_s: a text of p prompt tokens continued by up to N puts p - 1 tokens into
    its key/value cache, runs N steps of one token and a capture of p + N; the request is
    charged all of them (the quota's message names what it needs), not p + N alone."""
    from service.clients import ClientTable

    path = tmp_path / "clients.toml"
    path.write_text('[clients.gen]\ntoken = "gen-token"\ntokens_per_s = 1\n')
    lengths = [e.length for e in svc_gpt2.tokenize(PROMPTS)]
    want = sum(p + NEW + (p - 1) + NEW for p in lengths)  # by hand, from the docs
    with running_server(svc_gpt2, clients=ClientTable(path)) as (_, address):
        with AttentionClient(address, token="gen-token", timeout=60, retries=0) as c:
            c.capture(PROMPTS, generate=NEW)  # a full bucket lets one through, into debt
            with pytest.raises(AttentionServiceError) as e:
                c.capture(PROMPTS, generate=NEW)
            assert (e.value.code, e.value.limit) == (EXHAUSTED, "tokens_per_s")
            assert f"this request needs {want})" in e.value.message
            with pytest.raises(AttentionServiceError) as e:
                c.capture(PROMPTS)  # without generation: the texts alone
            assert f"this request needs {sum(lengths)})" in e.value.message


def test_a_prompt_already_at_the_limit_is_charged_no_generation_forward(svc_gpt2):
    # too_long="truncate": a prompt cut to the model's positions has no room for a token
    # (stop "limit" at once: `Continuations`), so nothing is prefilled or stepped; the
    # request is charged its capture alone, and the prompt beside it its forwards.
    from service.generation import GenerationAsk
    from service.requests import ParsedRequest

    limit = svc_gpt2.config.max_length
    texts = ["word " * (2 * limit), "a b c"]
    prompts, tokenized = svc_gpt2.plan_generation(texts, NEW, "truncate")
    p = prompts[1].length
    assert prompts[0].length == limit == tokenized[0].length
    parsed = ParsedRequest(
        spec=None,
        tokenized=tokenized,
        codec="raw",
        max_chunk_bytes=1,
        generation=GenerationAsk(tuple(prompts), NEW),
    )
    assert parsed.work_tokens == limit + (p + NEW) + (p - 1 + NEW)
