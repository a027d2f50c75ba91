"""attention.proto's comments are enough to write a client: a decoder written from them alone.

The decoder below follows the comments of protos/jaxattn/v1/attention.proto and
nothing else: it imports neither jaxattn.wire, jaxattn.dtypes nor the client
(raw grpc, the generated messages, numpy, zlib and the codec libraries). Its
float32 tensors must equal the engine's bit for bit, its uint8 ones the Python
client's dequantised values bit for bit (the comment states the arithmetic),
and float16/bfloat16 must stay within the error bounds the comments state.
"""

from __future__ import annotations

import itertools
import re
import zlib
from pathlib import Path

import grpc
import numpy as np
import pytest
from service_support import WHAT as SHARED_WHAT  # compiled by the other service tests too

from jaxattn.quantities import COMMON, DECODER_HEAD_STATS, HEAD_STATS, NORM_MEASURES, QUANTITIES
from jaxattn.v1 import attention_pb2 as pb

PROTO = Path(__file__).resolve().parents[2] / "protos" / "jaxattn" / "v1" / "attention.proto"
TEXTS = ["the cat sat on the mat", "hello world"]
# Probability tensors ([L,H,T,S] and [L,T,M]) and affine ones; sum_alpha_fx_norm and
# mixing_ratio also for their every-head rule.
WHAT = ("attention", "alpha_fx_norm", "sum_alpha_fx_norm", "mixing_ratio")
DTYPES = {
    "float32": pb.DTYPE_FLOAT32,
    "float16": pb.DTYPE_FLOAT16,
    "bfloat16": pb.DTYPE_BFLOAT16,
    "uint8": pb.DTYPE_UINT8,
}
CODECS = {"none": pb.CODEC_NONE, "zstd": pb.CODEC_ZSTD, "lz4": pb.CODEC_LZ4}


# -- the decoder, from the comments only -------------------------------------------------


def decompress(data: bytes, codec: int) -> bytes:
    if codec in (pb.CODEC_UNSPECIFIED, pb.CODEC_NONE):
        return data
    if codec == pb.CODEC_ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data)
    import lz4.frame

    return lz4.frame.decompress(data)


def element_values(raw: bytes, chunk: pb.TensorChunk) -> np.ndarray:
    """TensorChunk: little-endian `datatype` elements; UINT8 per the `scale` comment."""
    if chunk.datatype == "FP32":
        return np.frombuffer(raw, "<f4").astype(np.float32)
    if chunk.datatype == "FP16":
        return np.frombuffer(raw, "<f2").astype(np.float32)  # subnormals kept, inf kept
    if chunk.datatype == "BF16":  # the high half of a binary32
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    assert chunk.datatype == "UINT8"
    s, o = np.float32(chunk.scale), np.float32(chunk.offset)
    q = np.frombuffer(raw, np.uint8).astype(np.float32)
    product = (q * s).astype(np.float32)  # rounded to binary32 before the add
    return (product + o).astype(np.float32)


def decode(messages) -> list[tuple[pb.ExampleHeader, dict[str, np.ndarray]]]:
    """Headers and float tensors of a Capture response stream (one item per message, or
    several: a coalesced message's `items`)."""
    examples, header, buffers, last = [], None, {}, {}
    for message in (item for m in messages for item in (m.items or [m])):
        if message.WhichOneof("item") == "header":
            header, buffers = message.header, {}
            examples.append((header, {}))
            continue
        chunk = message.chunk
        assert chunk.example_index == header.index
        data = decompress(chunk.data, chunk.codec)
        assert len(data) == chunk.byte_length and zlib.crc32(data) == chunk.crc32
        buf = buffers.setdefault(chunk.tensor, bytearray(chunk.total_bytes))
        buf[chunk.byte_offset : chunk.byte_offset + chunk.byte_length] = data
        last[chunk.tensor] = chunk
        if chunk.byte_offset + chunk.byte_length == chunk.total_bytes:
            shape = tuple(chunk.shape)
            examples[-1][1][chunk.tensor] = element_values(bytes(buf), chunk).reshape(shape)
    return examples


def capture(address: str, **fields) -> list:
    with grpc.insecure_channel(address) as channel:
        rpc = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=pb.CaptureRequest.SerializeToString,
            response_deserializer=pb.CaptureResponse.FromString,
        )
        return decode(rpc(pb.CaptureRequest(**fields), timeout=60))


# -- the tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(svc_engine):
    """The engine's own captures: float32, and uint8 as the Python side dequantises it."""
    return {dtype: svc_engine.capture(TEXTS, what=WHAT, dtype=dtype) for dtype in DTYPES}


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_a_decoder_written_from_the_comments_matches_the_python_side(address, reference, dtype):
    for (codec, codec_pb), coalesce in itertools.product(CODECS.items(), (False, True)):
        got = capture(
            address,
            texts=[pb.Text(text=t) for t in TEXTS],
            what=WHAT,
            dtype=DTYPES[dtype],
            codec=codec_pb,
            max_chunk_bytes=4096 if coalesce else 1024,
            coalesce=coalesce,
        )
        assert len(got) == len(TEXTS)
        for (header, tensors), want32, want in zip(
            got, reference["float32"], reference[dtype], strict=True
        ):
            assert tuple(header.tokens) == want32.tokens and not header.truncated
            assert not header.HasField("generated_start")  # set only with generate
            assert not header.HasField("stop")
            assert sorted(header.tensors) == sorted(WHAT)  # the server's order
            for name in WHAT:
                x, d = want32.array(name), tensors[name]
                assert d.dtype == np.float32 and d.shape == x.shape, (codec, name)
                if dtype in ("float32", "uint8"):  # bit-exact: float32 / the stated formula
                    np.testing.assert_array_equal(
                        d.view(np.uint32), want.array(name).view(np.uint32)
                    )
                if dtype == "float16":  # 2^-11 relative; subnormals: 2^-25 absolute
                    assert np.all(np.abs(d - x) <= 2.0**-11 * np.abs(x) + 2.0**-25), name
                if dtype == "bfloat16":
                    assert np.all(np.abs(d - x) <= 2.0**-8 * np.abs(x) + 2.0**-133), name
                if dtype == "uint8":  # 1/510 for attention, (max - min)/510 for the rest
                    span = 1.0 if QUANTITIES[name].probability else float(x.max() - x.min())
                    assert np.all(np.abs(d - x) <= span / 510 * (1 + 1e-5) + 1e-7), name


def test_sums_over_heads_take_every_head_whatever_heads_selects(address, reference):
    texts = [pb.Text(text=t) for t in TEXTS]
    subset = capture(address, texts=texts, what=WHAT, heads=[1])
    for (_, got), want in zip(subset, reference["float32"], strict=True):
        assert got["alpha_fx_norm"].shape[1] == 1
        np.testing.assert_array_equal(got["alpha_fx_norm"][:, 0], want.alpha_fx_norm[:, 1])
        np.testing.assert_array_equal(got["sum_alpha_fx_norm"], want.sum_alpha_fx_norm)
        np.testing.assert_array_equal(got["mixing_ratio"], want.mixing_ratio)


def test_a_cut_text_says_truncated_in_its_header(address):
    long = " ".join(["the cat sat on the mat"] * 12)
    got = capture(
        address, texts=[pb.Text(text=long), pb.Text(text=TEXTS[0])], what=SHARED_WHAT, truncate=True
    )
    assert [h.truncated for h, _ in got] == [True, False]
    assert len(got[0][0].tokens) == 67  # the model's max_positions


def test_model_info_states_the_limits_and_the_weights(address, svc_engine):
    with grpc.insecure_channel(address) as channel:
        info = channel.unary_unary(
            "/jaxattn.v1.AttentionService/GetModelInfo",
            request_serializer=pb.GetModelInfoRequest.SerializeToString,
            response_deserializer=pb.ModelInfo.FromString,
        )(pb.GetModelInfoRequest(), timeout=10)
    assert (info.max_texts, info.max_tokens) == (64, 1500)  # conftest's `served`
    assert info.max_request_bytes == 4 << 20 and info.max_metadata_bytes == 16 << 10
    assert (info.min_chunk_bytes, info.max_chunk_bytes) == (1024, 64 << 20)
    assert info.default_chunk_bytes == (4 << 20) - (16 << 10)
    assert info.weights == svc_engine.info.weights and info.weights.startswith("blake2b:")
    assert list(info.quantities) == list(COMMON)


def test_the_what_comment_gives_every_quantity_its_axes():
    text = PROTO.read_text()
    block = text[text.index("repeated Text texts = 1;") : text.index("repeated string what = 2;")]
    documented = {}
    for names, axes in re.findall(r"//   ([a-z][a-z0-9_, ]*) \[([A-Z0-9+,]+)\]", block):
        for name in names.split(","):
            documented[name.strip()] = axes
    want = {}
    for name, q in QUANTITIES.items():
        axes = [a for a in q.axes]
        fixed = {
            "N": len(HEAD_STATS),
            "P": len(DECODER_HEAD_STATS),
            "M": len(NORM_MEASURES),
        }  # the fixed axes, by size
        axes = [str(fixed[a]) if a in fixed else a for a in axes]
        if q.extra_layer:
            axes[0] = f"L+{q.extra_layer}"
        want[name] = ",".join(axes)
    assert documented == want
