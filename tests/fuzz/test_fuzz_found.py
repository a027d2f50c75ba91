"""The inputs the fuzzers found that broke a parser's contract, each now answered with the
parser's designed error (RELIABILITY.md, Fuzzing). Each test names the input."""

from __future__ import annotations

import json
import zipfile
import zlib

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture
from jaxattn.checkpoints.hf_files import read_config
from jaxattn.errors import CaptureFileError, CheckpointError, InputError
from jaxattn.inputs import read_conllu, read_records
from jaxattn.store import layout, open_store
from jaxattn.store.manifest import Entry
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire.codecs import WireError
from jaxattn.wire.receive import StreamDecoder

DEEP = "[" * 3000  # json's decoder recursed once per bracket: RecursionError


def _meta(path) -> dict:
    with np.load(path) as archive:
        return json.loads(str(archive["__meta__"]))


def _save_with_meta(path, meta: dict) -> None:
    tensors = make("float32").tensors
    np.savez(path, __meta__=np.array(json.dumps(meta)), **tensors)


def test_capture_file_with_an_unknown_zip_compression_method(tmp_path):
    """A .npz whose entry claims compression method 99: zipfile raised NotImplementedError."""
    path = tmp_path / "c.npz"
    make("float32").save(path)
    data = bytearray(path.read_bytes())
    data[8:10] = (99).to_bytes(2, "little")  # the first local header's compression method
    offset = bytes(data).index(b"PK\x01\x02")  # and its central directory entry's
    data[offset + 10 : offset + 12] = (99).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureFileError, match="not a readable jaxattn capture"):
        Capture.load(path)


def test_capture_file_with_an_array_of_petabytes(tmp_path):
    """A 2 KB .npz whose attention.npy header claims shape (2^50,) float32
    (tests/fuzz/corpus/capture_file/array-of-4-pib.npz): numpy's MemoryError."""
    path = tmp_path / "c.npz"
    make("float32").save(path)
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1125899906842624,), }"
    header = header.ljust(117) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(16)
    with zipfile.ZipFile(path) as old:
        entries = {n: old.read(n) for n in old.namelist()}
    with zipfile.ZipFile(path, "w") as new:
        for name, data in entries.items():
            new.writestr(name, npy if name == "attention.npy" else data)
    with pytest.raises(CaptureFileError, match="claims more memory than this machine has"):
        Capture.load(path)


@pytest.mark.parametrize(
    "field, value",
    [
        ("heads", [0, 2, 0.5]),  # loaded as a Capture with a float head
        ("sentence_b_start", 214748318446744073709551616),  # past the tokens
        ("tokens", "[CLS] a"),  # a string: its characters became the tokens
        ("text", ["a", "b", "c"]),  # a "pair" of three
        ("quantization", {"attention": [-1]}),  # IndexError
        ("layers", DEEP),  # RecursionError
    ],
)
def test_capture_file_metadata_of_the_wrong_kind(tmp_path, field, value):
    path = tmp_path / "c.npz"
    make("float32").save(path)
    meta = _meta(path)
    if value is DEEP:
        text = json.dumps(meta).replace('"layers": [1, 4]', f'"layers": {DEEP}')
        tensors = make("float32").tensors
        np.savez(path, __meta__=np.array(text), **tensors)
    else:
        _save_with_meta(path, {**meta, field: value})
    with pytest.raises(CaptureFileError, match=field if value is not DEEP else "deeply"):
        Capture.load(path)


def test_conllu_head_past_the_sentence(tmp_path):
    """HEAD 33333333333 (and 5 in a two-word sentence) were read, and `arcs` pointed at a
    word that does not exist."""
    rows = "1\tPresident\t_\t_\t_\t_\t2\tnmod\t_\t_\n2\tBush\t_\t_\t_\t_\t5\tnsubj\t_\t_\n"
    with pytest.raises(InputError, match="line 2: HEAD 5 is no word of the sentence"):
        list(read_conllu(rows.splitlines()))
    path = tmp_path / "in.conllu"
    path.write_text("1\tThe\t_\t_\t_\t_\t33333333333\tdet\t_\t_\n\n")
    with pytest.raises(InputError, match="in.conllu:1: HEAD 33333333333"):
        list(read_records(path))


def test_jsonl_nested_too_deeply(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a"}\n' + DEEP + "\n")
    with pytest.raises(InputError, match="in.jsonl:2: bad JSON: nested too deeply"):
        list(read_records(path))


def test_checkpoint_config_model_type_not_a_string(tmp_path):
    """{"model_type": []}: TypeError (unhashable type: 'list')."""
    for value, words in (([], "a list"), ({}, "an object")):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": value}))
        with pytest.raises(CheckpointError, match=f"model_type is .* \\({words}\\).*string"):
            read_config(tmp_path)
    (tmp_path / "config.json").write_text(DEEP)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        read_config(tmp_path)


def _store(tmp_path, root: str, manifest: dict | None = None):
    (tmp_path / layout.manifest_key(0)).parent.mkdir(parents=True)
    (tmp_path / "zarr.json").write_text(root)
    if manifest is not None:
        doc = layout.group_metadata({layout.MANIFEST_ATTRIBUTE: manifest})
        (tmp_path / layout.manifest_key(0)).write_text(json.dumps(doc))
    return open_store(tmp_path, partial=True)


def test_store_zarr_json_nested_too_deeply(tmp_path):
    with pytest.raises(CaptureFileError, match="zarr.json is not valid JSON"):
        _store(tmp_path, DEEP)


def test_store_manifest_entry_with_a_negative_offset_or_dimension():
    """offset -9223372036854775809 and a shape dimension of it were taken as the example's
    place in the shard's array."""
    good = dict(record=0, line=1, id="0", tokens=["a"], sentence_b_start=None, text="a")
    Entry.from_json({**good, "data": {"attention": {"offset": 0, "shape": [1, 1, 1, 1]}}})
    for data in ({"offset": -(2**63) - 1, "shape": [1]}, {"offset": 0, "shape": [-1, 2]}):
        with pytest.raises(CaptureFileError, match="example 0: data is not what jaxattn writes"):
            Entry.from_json({**good, "data": {"attention": data}})
    with pytest.raises(CaptureFileError, match="tokens"):
        Entry.from_json({**good, "tokens": [1, 2], "data": {}})


@pytest.mark.parametrize(
    "name, shape, refusal",
    [
        ("attention", [1 << 20, 1 << 20, 1 << 10], r"has shape \[1048576, 1048576, 1024\]"),
        # a shape the header's fields allow: queries' head dim K is named by no field
        ("queries", [1, 1, 1, 1 << 50], "more than this client can hold"),
    ],
)
def test_wire_chunk_announcing_a_tensor_of_petabytes(name, shape, refusal):
    """A header and a first chunk (4 good bytes) of a 4 PiB float32 tensor (total_bytes
    to match): the client raised numpy's MemoryError making the tensor's buffer. A shape
    its header's tokens, layers and heads refuse is refused as such before any buffer."""
    decoder = StreamDecoder()
    header = pb.ExampleHeader(
        index=0, tokens=["a"], layers=[0], heads=[0], tensors=[name], chunk_count=1
    )
    decoder.feed(pb.CaptureResponse(header=header))
    chunk = pb.TensorChunk(
        tensor=name,
        datatype="FP32",
        shape=shape,
        total_bytes=4 << 50,
        byte_length=4,
        data=b"\0" * 4,
        crc32=zlib.crc32(b"\0" * 4),
    )
    with pytest.raises(WireError, match=refusal):
        decoder.feed(pb.CaptureResponse(chunk=chunk))


def test_native_config_with_no_heads(tmp_path):
    """jaxattn.json whose config has "num_heads": 0 (tests/fuzz/corpus/native_config/
    num-heads-0.json): ModelConfig divided by it (ZeroDivisionError)."""
    from jaxattn.checkpoints import native
    from jaxattn.config import tiny

    config = {**tiny().to_dict(), "num_heads": 0}
    meta = {"format": "jaxattn", "version": native.FORMAT_VERSION, "config": config}
    (tmp_path / native.MARKER).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="num_heads 0 must be positive"):
        native.load(tmp_path)


@pytest.fixture(scope="module")
def store_documents(tmp_path_factory):
    """A real two-shard store (`tests/store/store_helpers.py`): its folder, its root
    zarr.json and the manifest part of shard 0, as JSON."""
    import fuzz_store_manifest

    fuzz_store_manifest.prepare()
    folder = fuzz_store_manifest.workdir() / "store"
    root, _, manifest = fuzz_store_manifest.seeds()[0].partition(fuzz_store_manifest.SEPARATOR)
    return folder, root, manifest


@pytest.mark.parametrize(
    "name, change, message",
    [
        # TypeError: '<' not supported between 'int' and 'str'
        ("shard-count-a-string", ("root", "shards", "count", "2"), "shards.count is '2'"),
        # KeyError: 'bogus' on the first read
        ("dtype-unknown", ("root", "spec", "dtype", "bogus"), "spec.dtype is 'bogus'"),
        # read attention, which the store's quantities do not name
        ("quantity-not-in-the-store", ("root", "spec", "what", ["hidden_states"]), "not among"),
        # TypeError: slice indices (np.prod of Python ints past int64)
        (
            "shape-2-to-the-64",
            ("entry", "data", "attention", {"offset": 0, "shape": [2**64]}),
            "data is not what jaxattn writes",
        ),
        # IndexError: list index out of range
        (
            "quantization-of-one-number",
            ("entry", "quantization", {"attention": [1]}),
            "not a manifest part",
        ),
        # AttributeError: 'float' object has no attribute 'items'
        ("data-a-number", ("entry", "data", 0.5), "not a manifest part"),
        # ValueError: Unknown format code 'd' (naming the shard in a message)
        ("shard-a-string", ("part", "shard", "x"), "not a manifest part"),
    ],
)
def test_store_metadata_and_manifest_of_the_wrong_kind(store_documents, name, change, message):
    """tests/fuzz/corpus/store_manifest/NAME: each was an undesigned exception or a read
    of the wrong data."""
    folder, root, manifest = store_documents
    doc, *keys, value = change
    root_doc, part_doc = json.loads(root), json.loads(manifest)
    part = part_doc["attributes"][layout.MANIFEST_ATTRIBUTE]
    target = {"root": root_doc["attributes"]["jaxattn"], "part": part}.get(doc)
    target = part["examples"][0] if target is None else target
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    (folder / "zarr.json").write_text(json.dumps(root_doc))
    (folder / layout.manifest_key(0)).write_text(json.dumps(part_doc))
    with pytest.raises(CaptureFileError, match=message):
        list(open_store(folder, partial=True))


def test_checkpoint_config_number_of_5000_digits(tmp_path):
    """config.json holding a 5,000-digit number (tests/fuzz/corpus/checkpoint_config/
    number-of-5000-digits.json): json's ValueError past int_max_str_digits, not the
    JSONDecodeError read_json_object caught."""
    (tmp_path / "config.json").write_text("1" * 5000)
    with pytest.raises(CheckpointError, match="not a usable JSON file: Exceeds the limit"):
        read_config(tmp_path)


def test_tokenizer_json_with_an_id_of_2_to_the_31(bert_checkpoint, tmp_path, monkeypatch):
    """A 2.6 KB tokenizer.json whose vocab gives "fox" the id 2^31 (tests/fuzz/corpus/
    tokenizer_file/vocab-id-2-to-the-31.json): the backend allocated ~8 GB before
    jaxattn's vocabulary check refused it; now it is refused before the backend runs."""
    import shutil

    from jaxattn.checkpoints.hf_files import read_config
    from jaxattn.checkpoints.loading import read_tokenizer
    from jaxattn.engine import Tokenizer

    for f in bert_checkpoint.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, tmp_path / f.name)
    doc = json.loads((tmp_path / "tokenizer.json").read_text())
    doc["model"]["vocab"]["fox"] = 2**31
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))

    def never(*args):
        raise AssertionError("the backend was asked to load the tokenizer")

    monkeypatch.setattr(Tokenizer, "from_dir", never)
    with pytest.raises(CheckpointError, match="ids up to 2147483648, but the model's vocab_size"):
        read_tokenizer(tmp_path, read_config(bert_checkpoint))


def test_tokenizer_json_without_its_unknown_token(bert_checkpoint, tmp_path):
    """A WordPiece tokenizer.json whose [UNK] is gone (tests/fuzz/corpus/tokenizer_file/
    unk-token-missing.json) loaded, then raised the backend's bare Exception ("WordPiece
    error: Missing [UNK] token") on the first word it did not know."""
    import shutil

    from jaxattn.checkpoints.hf_files import read_config
    from jaxattn.checkpoints.loading import read_tokenizer

    for f in bert_checkpoint.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, tmp_path / f.name)
    doc = json.loads((tmp_path / "tokenizer.json").read_text())
    del doc["model"]["vocab"]["[UNK]"]
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] != "[UNK]"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="cannot tokenise a text.*Missing \\[UNK\\]"):
        read_tokenizer(tmp_path, read_config(bert_checkpoint))


def test_capture_file_naming_more_heads_than_its_tensors_hold(tmp_path):
    """__meta__ naming heads [0, 2, 5, 7] for tensors of 3 heads (tests/fuzz/corpus/
    capture_file/heads-past-the-tensors.json): loaded, then `select(heads=[7])` raised
    IndexError (the targets now select one layer and head of what loads)."""
    path = tmp_path / "c.npz"
    make("float32").save(path)
    _save_with_meta(path, {**_meta(path), "heads": [0, 2, 5, 7]})
    with pytest.raises(CaptureFileError, match=r"'attention' has shape \[2, 3, 5, 5\], expected"):
        Capture.load(path)


def test_wire_header_naming_more_heads_than_its_tensors_hold():
    """A stream whose header names heads (0, 2, 5, 7) for tensors of 3 heads (tests/fuzz/
    corpus/wire_receive/heads-past-the-tensors): the client built the Capture, then
    `select(heads=[7])` raised IndexError; now the first chunk is refused."""
    import dataclasses

    from jaxattn.wire.send import chunk_example

    cap = dataclasses.replace(make("float32"), heads=(0, 2, 5, 7))
    decoder = StreamDecoder()
    with pytest.raises(WireError, match=r"'attention' has shape \[2, 3, 5, 5\], expected \[2, 4"):
        for message in chunk_example(0, cap, codec="none", max_chunk_bytes=64):
            decoder.feed(message)


def _tokens_file(tmp_path, text: str):
    from service.clients import ClientTable

    path = tmp_path / "clients.toml"
    path.write_bytes(text.encode())
    return ClientTable(path, clock=lambda: 0.0, now=lambda: 0.0)


@pytest.mark.parametrize(
    "name, text, line, refusal",
    [
        # tomllib's int() past Python's 4,300 digits: ValueError, not TOMLDecodeError
        ("int-of-5000-digits", "requests_per_s = " + "1" * 5000, 3, "4300 digits"),
        # math.isfinite / float() of a 401-digit integer: OverflowError
        ("rate-of-400-digits", "result_mib = 1" + "0" * 400, 3, "about 401 digits"),
        # two positive numbers whose product, the bucket, is 0.0: TokenBucket's ValueError
        ("tiny-rate-tiny-burst", "requests_per_s = 5e-324\nburst_s = 0.5", 3, "holds nothing"),
    ],
)
def test_tokens_file_numbers_past_what_python_holds(tmp_path, name, text, line, refusal):
    """(tests/fuzz/corpus/tokens_file/NAME.toml) each crashed `jaxattn serve --tokens`
    at start with a traceback instead of the file's line."""
    with pytest.raises(InputError, match=refusal) as info:
        _tokens_file(tmp_path, f'[clients.a]\ntoken = "x"\n{text}\n')
    assert info.value.line == line


def test_tokens_file_concurrent_calls_of_400_digits_is_no_limit(tmp_path):
    """(tests/fuzz/corpus/tokens_file/concurrent-calls-of-400-digits.toml) math.isfinite
    of it raised OverflowError; a whole number that large is a limit never reached."""
    table = _tokens_file(tmp_path, '[clients.a]\ntoken = "x"\nconcurrent_calls = 1' + "0" * 400)
    assert table.quota("a").limits.concurrent_calls == 10**400


@pytest.mark.parametrize(
    "name, text, line",
    [
        # read_text's universal newlines took each CR for a line: line 5 of a 3-line file
        ("lone-cr-line-breaks", '[clients.a]\r\r\rtoken = "x"\nrequests_per_s = = 1\n', 1),
        # str.splitlines broke at U+2028 (found inside a token, which is refused now as
        # no header can carry it; in a comment): concurrent_calls "on line 6", not 4
        (
            "u2028-in-a-comment",
            '[clients.a]\n# a\u2028b\u2028c\ntoken = "x"\nconcurrent_calls = 0\n',
            4,
        ),
    ],
)
def test_tokens_file_lines_are_counted_at_line_feeds(tmp_path, name, text, line):
    """A token file's error names the line an editor (and TOML) shows, not one past the end
    (tests/fuzz/corpus/tokens_file/NAME.toml; the target checks every line it is told)."""
    with pytest.raises(InputError) as info:
        _tokens_file(tmp_path, text)
    assert info.value.line == line
