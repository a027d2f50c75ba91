"""The load test's machinery, small: it counts right, catches wrong answers, samples RSS."""

from __future__ import annotations

import os

import numpy as np
import pytest
from rel_support import SENTENCES, WHAT, ShapeEngine, running_server

from jaxattn.bench.expect import ExampleExpectation, build_expectations, check_answer
from jaxattn.bench.load_generator import LoadRequest, listening_pid, rss_kb, run_load
from jaxattn.capture import Capture

MIX = [
    LoadRequest("single", (SENTENCES[0],), WHAT, dtype="float32", codec="zstd"),
    LoadRequest("single", (SENTENCES[2],), WHAT, dtype="uint8", codec="lz4"),
    LoadRequest("pair", ((SENTENCES[0], SENTENCES[1]),), WHAT, dtype="float32", codec="none"),
    LoadRequest("batch", tuple(SENTENCES), WHAT, dtype="uint8", codec="zstd", weight=0.5),
]


@pytest.fixture(scope="module")
def mix_expected(rel_engine):
    return build_expectations(rel_engine, MIX, max_batch=4)


def test_a_small_load_run_is_all_right_and_counted(rel_engine, mix_expected):
    with running_server(rel_engine) as (_, address):
        port = int(address.rsplit(":", 1)[1])
        assert listening_pid(port) == os.getpid()  # the in-process server is us
        result = run_load(
            address,
            MIX,
            mix_expected,
            clients=4,
            max_requests=40,
            server_pid=os.getpid(),
            rss_every_s=0.05,
            client_options=dict(timeout=30),
        )
    s = result.summary()
    assert (s["requests"], s["ok"], s["wrong"], s["lost"], s["errors"]) == (40, 40, 0, 0, {})
    assert 0 < s["p50_ms"] <= s["p99_ms"]
    assert set(s["by_kind"]) <= {"single", "pair", "batch"}
    assert s["rss_mib"]["start"] > 0 and s["rss_mib"]["max"] >= s["rss_mib"]["end"] > 0


def test_wrong_answers_are_caught_and_counted(rel_engine, mix_expected):
    with running_server(ShapeEngine(rel_engine)) as (_, address):  # zeros: all wrong
        result = run_load(
            address, MIX, mix_expected, clients=2, max_requests=8, client_options=dict(timeout=30)
        )
    assert result.requests == 8 and result.ok == 0 and len(result.wrong) == 8
    assert "outside the documented error" in result.wrong[0]


def test_the_checker_holds_each_encoding_to_its_documented_error():
    ref = np.array([[0.5, 0.25, 1e-3, 3.0]], np.float32)
    exp = ExampleExpectation(
        tokens=("a",),
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        candidates={"fx_norm": (ref,)},
    )

    def cap(dtype, array, quant=None):
        return Capture(
            tokens=("a",),
            sentence_b_start=None,
            layers=(0,),
            heads=(0,),
            dtype=dtype,
            tensors={"fx_norm": array},
            quantization={"fx_norm": quant} if quant else {},
        )

    assert check_answer([cap("float32", ref.copy())], [exp]) is None
    assert check_answer([cap("float32", np.nextafter(ref, 9))], [exp]) is not None  # 1 ulp
    assert check_answer([cap("float16", ref.astype(np.float16))], [exp]) is None
    off = (ref * (1 + 2.0**-9)).astype(np.float16)  # 4x float16's error
    assert check_answer([cap("float16", off)], [exp]) is not None
    scale = (3.0 - 1e-3) / 255
    q = np.round((ref - 1e-3) / scale).astype(np.uint8)
    assert check_answer([cap("uint8", q, (scale, 1e-3))], [exp]) is None
    q2 = q.copy()
    q2[0, 1] += 1  # one step off: an error of `scale`, twice the bound
    assert check_answer([cap("uint8", q2, (scale, 1e-3))], [exp]) is not None
    other = Capture(
        tokens=("b",),
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        dtype="float32",
        tensors={"fx_norm": ref},
    )
    assert "tokens" in check_answer([other], [exp])
    assert "1 examples answered, 2 asked" in check_answer([cap("float32", ref)], [exp, exp])


def test_rss_of_a_gone_process_is_none():
    assert rss_kb(os.getpid()) > 0
    assert rss_kb(2**22 + 12345) is None


def test_the_cli_has_loadtest():
    from jaxattn.cli import build_parser

    args = build_parser().parse_args(["loadtest", "--server", "127.0.0.1:1", "--requests", "5"])
    assert (args.clients, args.requests, args.duration) == (64, 5, None)
