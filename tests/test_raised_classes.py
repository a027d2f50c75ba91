"""Checks a caller can reach raise jaxattn's own classes (docs/errors.md), not bare
ValueErrors: one case a check, each a direct call (no model is compiled)."""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import zstandard
from tiny_models import config_of

from jaxattn import Capture
from jaxattn.errors import CaptureFileError, CheckpointError, InputError, UsageError
from jaxattn.positions import Relative
from jaxattn.wire.codecs import WireError


def _choose_block_below_one(tmp):
    from jaxattn.engine import blockwise

    blockwise.choose_block("dense", None, (), 0, block=0)


def _blockwise_with_relative_positions(tmp):
    import jax

    from jaxattn.engine.step import CaptureStep

    config = dataclasses.replace(config_of("bert"), relative=Relative())
    CaptureStep(config, {}, jax.devices("cpu"), layer_loop="unrolled", attention="blockwise")


def _masked_lm_without_a_mask_token(tmp):
    from jaxattn.engine.mlm import MaskedLM

    hf = SimpleNamespace(mask_token_id=None, all_special_ids=[])
    MaskedLM(SimpleNamespace(tokenizer=SimpleNamespace(hf=hf)), [], mask_rate=0.15, seed=0)


def _rope_theta_zero(tmp):
    from jaxattn.engine import rotary

    rotary.inverse_frequencies(8, 0.0)


def _kv_cache_warmup_sizes(tmp):
    from jaxattn.engine.kv_cache import KVDecoder

    KVDecoder.warmup(None, sizes="some")  # refused before anything of the decoder is read


def _tls_cert_without_key(tmp):
    from jaxattn.cli.serve_cmd import server_options

    server_options(argparse.Namespace(tls_cert="cert.pem", tls_key=None))


def _empty_token_file(tmp):
    from jaxattn.cli.args import read_token

    (tmp / "token").write_text(" \n")
    read_token(str(tmp / "token"))


def _manifest_part_of_a_negative_shard(tmp):
    from jaxattn.store.manifest import ShardPart

    ShardPart.from_json({"shard": -1, "records": [0, 1], "examples": []})


def _heads_of_a_grouped_query_capture_without_kv_heads(tmp):
    keys = np.zeros((1, 2, 3, 4), np.float32)  # [L, G, T, K]: 2 key/value heads, 4 query heads
    cap = Capture(
        tokens=("a", "b", "c"),
        sentence_b_start=None,
        layers=(0,),
        heads=(0, 1, 2, 3),
        dtype="float32",
        tensors={"keys": keys},
    )
    cap.select(heads=[1])


def _unknown_on_error(tmp):
    from jaxattn.inputs import read_records

    (tmp / "in.txt").write_text("a\n")
    list(read_records(tmp / "in.txt", on_error="ignore"))


def _conllu_file_names_its_path(tmp):
    from jaxattn.inputs import read_conllu

    (tmp / "in.conllu").write_text(
        "1\tA\t_\t_\t_\t_\t0\troot\t_\t_\n2\tB\t_\t_\t_\t_\tx\tdep\t_\t_\n"
    )
    list(read_conllu(tmp / "in.conllu"))


def _truncated_varint(tmp):
    from jaxattn.wire import protowire

    protowire.read_varint(b"\x96\x81", 0)


def _varint_of_eleven_bytes(tmp):
    from jaxattn.wire import protowire

    protowire.read_varint(b"\xff" * 11, 0)


def _zstd_frame_cut_in_a_block_header(tmp):
    from jaxattn.wire import codecs

    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"abc" * 10)
    codecs._frame_size(frame[: zstandard.frame_header_size(frame) + 2])


CASES = {
    "attention block 0": (
        _choose_block_below_one,
        UsageError,
        "attention_block must be at least 1, got 0",
    ),
    "blockwise DeBERTa": (
        _blockwise_with_relative_positions,
        UsageError,
        "attention='blockwise': bert models .*have no blockwise path",
    ),
    "no mask token": (_masked_lm_without_a_mask_token, CheckpointError, "has no mask token"),
    "rope theta 0": (_rope_theta_zero, CheckpointError, "rope theta 0.0 must be positive"),
    "kv warmup sizes": (_kv_cache_warmup_sizes, UsageError, "unknown warmup sizes 'some'"),
    "tls cert alone": (_tls_cert_without_key, UsageError, "--tls-cert and --tls-key go together"),
    "empty token file": (_empty_token_file, InputError, r"token file \S*token is empty"),
    "manifest shard -1": (
        _manifest_part_of_a_negative_shard,
        CaptureFileError,
        "shard -1, records .*: not what jaxattn writes",
    ),
    "GQA heads, no kv_heads": (
        _heads_of_a_grouped_query_capture_without_kv_heads,
        UsageError,
        "keys of this grouped-query capture holds 2 key/value heads",
    ),
    "on_error": (_unknown_on_error, UsageError, "on_error must be one of stop, skip, got 'ignore'"),
    "conllu path": (_conllu_file_names_its_path, InputError, r"in\.conllu:2: HEAD 'x' is not an"),
    "truncated varint": (_truncated_varint, WireError, "truncated varint"),
    "long varint": (_varint_of_eleven_bytes, WireError, "varint longer than 10 bytes"),
    "zstd frame": (_zstd_frame_cut_in_a_block_header, WireError, "ends inside a block header"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_check_raises_its_class(case, tmp_path):
    call, cls, message = CASES[case]
    with pytest.raises(cls, match=message):
        call(tmp_path)
