"""Regenerate the committed Python code of the .proto files under protos/.

    .venv/bin/python protos/generate.py            # writes jaxattn/v1/*_pb2*.py and *.proto
    .venv/bin/python protos/generate.py --out DIR  # writes DIR/jaxattn/v1/... (the drift test)

The proto package `jaxattn.v1` maps to the Python package `jaxattn.v1`, so the
generated modules import each other as protoc writes them, with no path edits.
The generated code is committed (a client-only install needs no grpcio-tools);
tests/service/test_service_proto.py fails when it differs from what this script
writes, so a .proto edit without regeneration cannot land.

The .proto files are copied beside their code too (jaxattn/v1/attention.proto):
package data, so an installed jaxattn carries its contract (`jaxattn.v1.PROTO`);
tests/packaging fails when a copy differs from protos/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
FILES = ("jaxattn/v1/attention.proto",)


def generate(out: Path) -> list[Path]:
    """Run protoc on FILES into `out`; returns the written paths.

    Raises:
      RuntimeError: protoc failed (its messages are printed to stderr).
    """
    from grpc_tools import protoc  # dev dependency (grpcio-tools)

    out.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *[str(PROTOS / f) for f in FILES],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    written = []
    for f in FILES:
        stem = out / f.removesuffix(".proto")
        written += [stem.with_name(stem.name + s) for s in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]
    return written


def copy_protos(out: Path) -> list[Path]:
    """Copy FILES to the same paths under `out` (the package data); returns them."""
    written = []
    for f in FILES:
        target = out / f
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((PROTOS / f).read_bytes())
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: repo root)")
    args = parser.parse_args(argv)
    for path in generate(args.out) + copy_protos(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
