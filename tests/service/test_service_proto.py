"""The .proto is the contract: generated code matches it, and everything in it is documented."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "protos" / "jaxattn" / "v1" / "attention.proto"


def load_generator():
    path = ROOT / "protos" / "generate.py"
    spec = importlib.util.spec_from_file_location("protos_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_generated_code_matches_the_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    written = load_generator().generate(tmp_path)
    assert len(written) == 3
    for path in written:
        committed = ROOT / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed.relative_to(ROOT)} is stale: run `python protos/generate.py`"
        )


def test_every_message_field_enum_value_and_rpc_has_a_comment(tmp_path):
    pytest.importorskip("grpc_tools")
    from google.protobuf import descriptor_pb2

    out = tmp_path / "set.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'protos'}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            str(PROTO),
        ],
        check=True,
    )
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (f,) = fds.file
    commented = {
        tuple(loc.path) for loc in f.source_code_info.location if loc.leading_comments.strip()
    }
    missing = []
    # Descriptor field numbers: message_type 4, field 2, enum_type 5, value 2,
    # service 6, method 2 (descriptor.proto). Oneof members count as fields.
    for i, m in enumerate(f.message_type):
        if (4, i) not in commented:
            missing.append(m.name)
        for j, field in enumerate(m.field):
            if (4, i, 2, j) not in commented:
                missing.append(f"{m.name}.{field.name}")
    for i, e in enumerate(f.enum_type):
        if (5, i) not in commented:
            missing.append(e.name)
        for j, v in enumerate(e.value):
            if (5, i, 2, j) not in commented:
                missing.append(f"{e.name}.{v.name}")
    for i, s in enumerate(f.service):
        if (6, i) not in commented:
            missing.append(s.name)
        for j, r in enumerate(s.method):
            if (6, i, 2, j) not in commented:
                missing.append(f"{s.name}.{r.name}")
    assert not missing, f"undocumented in attention.proto: {missing}"
